// The shims' one way of reporting a C++ exception to Rust: its message copied into the
// caller's buffer `err` of `len` bytes (truncated, always NUL-terminated).
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>

inline void reinforge_copy_error(const std::exception& e, char* err, size_t len) {
  if (err != nullptr && len > 0) {
    std::strncpy(err, e.what(), len - 1);
    err[len - 1] = '\0';
  }
}
