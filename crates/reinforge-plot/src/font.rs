//! One-time registration of the embedded DejaVu Sans font with plotters' ab_glyph text backend.

use plotters::style::FontStyle;
use std::sync::Once;

static REGISTER: Once = Once::new();

/// Registers DejaVu Sans (regular, bold, oblique) under the `sans-serif` family name that plotters uses by
/// default. Idempotent and thread-safe; every chart function calls it, so callers never need to.
pub fn ensure_fonts() {
    REGISTER.call_once(|| {
        let faces: [(FontStyle, &'static [u8]); 4] = [
            (FontStyle::Normal, dejavu::sans::regular()),
            (FontStyle::Bold, dejavu::sans::bold()),
            (FontStyle::Oblique, dejavu::sans::oblique()),
            (FontStyle::Italic, dejavu::sans::oblique()),
        ];
        for (style, bytes) in faces {
            // The bytes are a valid TTF compiled into the binary; failure would be a packaging bug.
            plotters::style::register_font("sans-serif", style, bytes)
                .unwrap_or_else(|_| panic!("embedded DejaVu Sans font failed to parse"));
        }
    });
}
