// The shims as one translation unit (a unity build): each includes ATen's headers, which take
// about 10 s to parse of each file's 10 s compile; included here together they compile in
// 14 s instead of 50 (docs/ci.md). Each source stays a file of its own, named in build.rs.
#include "optim_shim.cpp"
#include "autocast_shim.cpp"
#include "linear_shim.cpp"
#include "decode_attention_shim.cpp"
#include "sampling_ops_shim.cpp"
