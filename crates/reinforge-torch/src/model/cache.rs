//! Key/value cache for incremental decoding.
//!
//! Each layer keeps preallocated buffers `[row capacity, H_kv, slot capacity, D]`. A forward
//! pass writes its keys/values into the next free slots in place and attention reads a view of
//! the filled prefix, so decoding a token costs the same however many tokens came before (the
//! former `cat` per token copied the whole cache: O(T²)). Buffers grow geometrically (doubling)
//! only when a batch outgrows them, so growth is amortised O(1) per token.
//!
//! Unfilled slots are never read: attention sees only the filled prefix of the filled rows.
//! Padding slots inside the prefix (left padding of a joined batch) are zeroed, so a masked
//! key never multiplies a non-finite value into the result.

use tch::Tensor;

/// Fewest slots a buffer is allocated with (small prompts would otherwise double every step).
const MIN_SLOTS: i64 = 16;

/// One layer's key and value buffers `[row capacity, H_kv, slot capacity, D]`.
#[derive(Debug)]
struct Buffers {
    k: Tensor,
    v: Tensor,
}

impl Buffers {
    /// Uninitialised buffers shaped like `like` (`[_, H_kv, _, D]`) with `rows` x `slots` room.
    fn alloc(like: &Tensor, rows: i64, slots: i64) -> Self {
        let s = like.size();
        let shape = [rows, s[1], slots, s[3]];
        let opts = (like.kind(), like.device());
        Self {
            k: Tensor::empty(shape, opts),
            v: Tensor::empty(shape, opts),
        }
    }

    fn row_capacity(&self) -> i64 {
        self.k.size()[0]
    }

    fn slot_capacity(&self) -> i64 {
        self.k.size()[2]
    }

    /// Views of rows `row..row + n`, slots `slot..slot + t`.
    fn window(&self, row: i64, n: i64, slot: i64, t: i64) -> (Tensor, Tensor) {
        let cut = |x: &Tensor| x.narrow(0, row, n).narrow(2, slot, t);
        (cut(&self.k), cut(&self.v))
    }

    /// Copies `k`, `v` (`[n, H_kv, t, D]`) into rows `row..`, slots `slot..`, in place.
    fn write(&self, row: i64, slot: i64, k: &Tensor, v: &Tensor) {
        let (n, t) = (k.size()[0], k.size()[2]);
        if n == 0 || t == 0 {
            return;
        }
        let (mut dk, mut dv) = self.window(row, n, slot, t);
        dk.copy_(k);
        dv.copy_(v);
    }

    /// Zeroes rows `row..row + n`, slots `0..t` (padding slots of joined rows).
    fn zero(&self, row: i64, n: i64, t: i64) {
        if n > 0 && t > 0 {
            let (mut k, mut v) = self.window(row, n, 0, t);
            let _ = k.zero_();
            let _ = v.zero_();
        }
    }

    /// New buffers of `rows_cap` x `slots_cap` holding the first `rows` rows' `len` slots moved
    /// right by `shift` slots (the slots before them zeroed): growth and left padding.
    fn relocated(&self, rows: i64, len: i64, shift: i64, rows_cap: i64, slots_cap: i64) -> Self {
        let out = Self::alloc(&self.k, rows_cap, slots_cap);
        let (k, v) = self.window(0, rows, 0, len);
        out.write(0, shift, &k, &v);
        out.zero(0, rows, shift);
        out
    }
}

/// The capacity to grow `current` to so that it holds `needed`: at least double (amortised
/// O(1) copying per appended slot or row).
fn grown(current: i64, needed: i64) -> i64 {
    needed.max(current.saturating_mul(2))
}

/// Per-layer keys and values `[B, H_kv, S, D]` of the positions decoded so far.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<Option<Buffers>>,
    /// Filled rows (the batch), equal in every allocated layer.
    rows: i64,
    /// Filled slots (cached positions, padding included).
    len: i64,
    /// Slots the first allocation reserves (a hint: more grows the buffers).
    reserve: i64,
}

impl KvCache {
    /// An empty cache for a model of `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        Self::with_capacity(num_layers, 0)
    }

    /// An empty cache whose first allocation holds at least `slots` positions, e.g. a prompt's
    /// length plus the tokens to sample, so that decoding never reallocates.
    pub fn with_capacity(num_layers: usize, slots: i64) -> Self {
        Self {
            layers: (0..num_layers).map(|_| None).collect(),
            rows: 0,
            len: 0,
            reserve: slots.max(0),
        }
    }

    /// Number of cached positions.
    pub fn len(&self) -> i64 {
        self.len
    }

    /// Whether nothing is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the buffers hold before they must grow (0 before the first forward pass).
    pub fn capacity(&self) -> i64 {
        self.first().map_or(0, Buffers::slot_capacity)
    }

    /// Rows the buffers hold before a join must grow them (0 before the first forward pass).
    pub fn row_capacity(&self) -> i64 {
        self.first().map_or(0, Buffers::row_capacity)
    }

    /// Address of layer `layer`'s key buffer (`None` before it is allocated or past the last
    /// layer): tests check with it that decoding writes in place instead of reallocating.
    pub fn key_buffer_address(&self, layer: usize) -> Option<usize> {
        let b = self.layers.get(layer)?.as_ref()?;
        Some(b.k.data_ptr() as usize)
    }

    fn first(&self) -> Option<&Buffers> {
        self.layers.iter().flatten().next()
    }

    /// The batch rows `idx`, in that order: finished sequences leave the batch, and a repeated
    /// index copies a row (samples sharing a prefilled prompt). Copies only the filled prefix.
    /// Rows that fit the buffers are written back into them in place (the selected prefix goes
    /// through one temporary), so rows retiring during decoding allocate no new buffers; more
    /// rows than the capacity move into new buffers of the same slot capacity.
    pub fn retain_rows(&mut self, idx: &Tensor) {
        let n = idx.size().first().copied().unwrap_or(0);
        let len = self.len;
        for slot in self.layers.iter_mut() {
            let Some(b) = slot.as_ref() else { continue };
            let (k, v) = b.window(0, self.rows, 0, len);
            let (k, v) = (k.index_select(0, idx), v.index_select(0, idx));
            if n > b.row_capacity() {
                *slot = Some(Buffers::alloc(&b.k, n, b.slot_capacity()));
            }
            if let Some(out) = slot.as_ref() {
                out.write(0, 0, &k, &v);
            }
        }
        self.rows = n;
    }

    /// Appends the rows of `other` (continuous batching: sequences admitted into a running
    /// batch). The shorter cache is left-padded with zero slots, which the caller's key mask
    /// marks as padding (positions are explicit, so padding changes nothing else). When this
    /// cache is at least as long as `other` and has room, `other`'s rows are written into the
    /// free rows in place; otherwise the buffers are reallocated once (with doubled room).
    pub fn join(&mut self, other: KvCache) {
        let (a, b) = (self.len, other.len);
        let len = a.max(b);
        let rows = self.rows + other.rows;
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            let Some(theirs) = theirs else { continue };
            let Some(m) = mine.as_ref() else {
                let cap = grown(theirs.slot_capacity(), len);
                *mine = Some(theirs.relocated(other.rows, b, len - b, other.rows, cap));
                continue;
            };
            let shift = len - a;
            if shift > 0 || rows > m.row_capacity() || len > m.slot_capacity() {
                let rows_cap = if rows > m.row_capacity() {
                    grown(m.row_capacity(), rows)
                } else {
                    m.row_capacity()
                };
                let slots_cap = if len > m.slot_capacity() {
                    grown(m.slot_capacity(), len)
                } else {
                    m.slot_capacity()
                };
                *mine = Some(m.relocated(self.rows, a, shift, rows_cap, slots_cap));
            }
            if let Some(m) = mine.as_ref() {
                let (k, v) = theirs.window(0, other.rows, 0, b);
                m.write(self.rows, len - b, &k, &v);
                m.zero(self.rows, other.rows, len - b);
            }
        }
        self.rows = rows;
        self.len = len;
    }

    /// Writes the keys/values `[B, H_kv, T, D]` of layer `layer` after the cached positions
    /// and returns views of that layer's whole filled prefix `[B, H_kv, len + T, D]`; the
    /// buffers grow (doubling) only when they lack room. The caller advances the length once
    /// every layer has appended.
    pub(crate) fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> (Tensor, Tensor) {
        let (n, t) = (k.size()[0], k.size()[2]);
        let needed = self.len + t;
        let (len, reserve) = (self.len, self.reserve);
        let Some(slot) = self.layers.get_mut(layer) else {
            return (k.shallow_clone(), v.shallow_clone());
        };
        let buffers = match slot.take() {
            None => Buffers::alloc(k, n, needed.max(reserve).max(MIN_SLOTS)),
            Some(b) if needed > b.slot_capacity() || n > b.row_capacity() => {
                let rows_cap = n.max(b.row_capacity());
                let slots_cap = grown(b.slot_capacity(), needed);
                b.relocated(n.min(self.rows), len, 0, rows_cap, slots_cap)
            }
            Some(b) => b,
        };
        buffers.write(0, len, k, v);
        let filled = buffers.window(0, n, 0, needed);
        *slot = Some(buffers);
        filled
    }

    /// Records that every layer appended `t` positions for a batch of `rows` rows.
    pub(crate) fn advance(&mut self, rows: i64, t: i64) {
        self.rows = rows;
        self.len += t;
    }
}
