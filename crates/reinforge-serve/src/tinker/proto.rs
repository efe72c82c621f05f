//! The protobuf messages of the Tinker wire format that the SDK sends or expects: the
//! `forward_backward` request body (`Content-Type: application/x-protobuf`) and the
//! `ForwardBackwardOutput` and `SampleResponse` results `retrieve_future` returns when the
//! request asks for `Accept: application/x-protobuf` (which the SDK 0.38 does for these two
//! result types and only accepts as proto).
//!
//! Field numbers and types are those of the SDK's `tinker/proto/tinker_public.proto` (package
//! `tinker_public`, read from the descriptor in `tinker_public_pb2.py`); only the fields this
//! server reads or writes are declared, and prost skips the others. Token ids travel as packed
//! little-endian `int32` bytes, float tensors as `float32` bytes (`request_conv.py`,
//! `response_conv.py`).

use std::collections::HashMap;

/// `DType`.
pub const DTYPE_FLOAT32: i32 = 1;
pub const DTYPE_INT64: i32 = 2;
pub const DTYPE_INT32: i32 = 3;

/// `StopReason`.
pub const STOP_REASON_STOP: i32 = 0;
pub const STOP_REASON_LENGTH: i32 = 1;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ForwardBackwardRequest {
    #[prost(string, tag = "1")]
    pub model_id: String,
    #[prost(int32, tag = "2")]
    pub seq_id: i32,
    #[prost(message, repeated, tag = "3")]
    pub data: Vec<Datum>,
    #[prost(string, tag = "4")]
    pub loss_fn: String,
    #[prost(map = "string, double", tag = "5")]
    pub loss_fn_config: HashMap<String, f64>,
    #[prost(bool, tag = "6")]
    pub forward_only: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Datum {
    #[prost(message, repeated, tag = "1")]
    pub model_input: Vec<Chunk>,
    #[prost(map = "string, message", tag = "2")]
    pub loss_fn_inputs: HashMap<String, Tensor>,
}

/// `Chunk`: a oneof of text, image and audio chunks; only text is served.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Chunk {
    #[prost(message, optional, tag = "1")]
    pub encoded_text: Option<EncodedTextChunk>,
    /// Set for an image chunk (only its presence is read: images are refused).
    #[prost(bytes = "vec", optional, tag = "2")]
    pub image: Option<Vec<u8>>,
    /// Set for an audio (dmel) chunk (refused).
    #[prost(bytes = "vec", optional, tag = "3")]
    pub dmel: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EncodedTextChunk {
    /// Token ids as little-endian int32.
    #[prost(bytes = "vec", tag = "1")]
    pub tokens: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Tensor {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub dense: Option<Vec<u8>>,
    #[prost(message, optional, tag = "2")]
    pub sparse_csr: Option<SparseCsr>,
    #[prost(int32, tag = "3")]
    pub dtype: i32,
    #[prost(int64, repeated, tag = "4")]
    pub shape: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SparseCsr {
    #[prost(bytes = "vec", tag = "1")]
    pub values: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BatchedTensor {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
    /// Byte offsets of each datum's slice in `data`, `n + 1` little-endian int64.
    #[prost(bytes = "vec", tag = "2")]
    pub offsets: Vec<u8>,
    #[prost(int32, tag = "3")]
    pub dtype: i32,
    #[prost(int64, repeated, tag = "4")]
    pub trailing_shape: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ArrayRecord {
    #[prost(string, tag = "1")]
    pub type_tag: String,
    #[prost(map = "string, message", tag = "2")]
    pub fields: HashMap<String, BatchedTensor>,
    #[prost(int64, tag = "3")]
    pub num_datums: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ForwardBackwardOutput {
    #[prost(string, tag = "1")]
    pub loss_fn_output_type: String,
    #[prost(message, repeated, tag = "2")]
    pub loss_fn_outputs: Vec<ArrayRecord>,
    #[prost(map = "string, double", tag = "3")]
    pub metrics: HashMap<String, f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SampledSequence {
    #[prost(int32, tag = "1")]
    pub stop_reason: i32,
    /// Token ids as little-endian int32.
    #[prost(bytes = "vec", tag = "2")]
    pub tokens: Vec<u8>,
    /// Log-probs as little-endian float32.
    #[prost(bytes = "vec", optional, tag = "3")]
    pub logprobs: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SampleResponse {
    #[prost(message, repeated, tag = "1")]
    pub sequences: Vec<SampledSequence>,
}

/// Little-endian int32 bytes as ids; `None` when the length is not a multiple of 4.
pub fn int32s(bytes: &[u8]) -> Option<Vec<i64>> {
    bytes.len().is_multiple_of(4).then(|| {
        bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
            .collect()
    })
}

/// The values of a dense tensor as `f64`, whatever its dtype (float32, int64 or int32).
pub fn tensor_values(t: &Tensor) -> Result<Vec<f64>, String> {
    if t.sparse_csr.is_some() {
        return Err("sparse tensors are not supported; send dense arrays".into());
    }
    let bytes = t.dense.as_deref().unwrap_or_default();
    let (width, read): (usize, fn(&[u8]) -> f64) = match t.dtype {
        DTYPE_FLOAT32 => (4, |c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64),
        DTYPE_INT32 => (4, |c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64),
        DTYPE_INT64 => (8, |c| {
            i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f64
        }),
        d => return Err(format!("unsupported dtype {d} (float32, int64 or int32)")),
    };
    if !bytes.len().is_multiple_of(width) {
        return Err(format!(
            "{} bytes is not a whole number of {width}-byte values",
            bytes.len()
        ));
    }
    let values: Vec<f64> = bytes.chunks_exact(width).map(read).collect();
    let count: i64 = t.shape.iter().product();
    if t.shape.len() != 1 || count as usize != values.len() {
        return Err(format!(
            "shape {:?} does not describe a 1-D array of the {} values sent",
            t.shape,
            values.len()
        ));
    }
    Ok(values)
}

/// `ForwardBackwardOutput` with one `ArrayRecord` holding each datum's `logprobs` (float32)
/// and the `loss:sum` metric, as `response_conv.deserialize_forward_backward_output` reads it.
pub fn forward_backward_output(logprobs: &[Vec<f32>], loss_sum: f64) -> ForwardBackwardOutput {
    let mut data = Vec::new();
    let mut offsets = vec![0i64];
    for row in logprobs {
        data.extend(row.iter().flat_map(|x| x.to_le_bytes()));
        offsets.push(data.len() as i64);
    }
    let field = BatchedTensor {
        data,
        offsets: offsets.iter().flat_map(|o| o.to_le_bytes()).collect(),
        dtype: DTYPE_FLOAT32,
        trailing_shape: vec![],
    };
    ForwardBackwardOutput {
        loss_fn_output_type: "ArrayRecord".into(),
        loss_fn_outputs: vec![ArrayRecord {
            type_tag: "ArrayRecord".into(),
            fields: HashMap::from([("logprobs".to_string(), field)]),
            num_datums: logprobs.len() as i64,
        }],
        metrics: HashMap::from([("loss:sum".to_string(), loss_sum)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn round_trips_and_rejects_bad_tensors() {
        let out = forward_backward_output(&[vec![-1.5, -0.25], vec![-3.0]], 4.75);
        let back = ForwardBackwardOutput::decode(out.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, out);
        let rec = &back.loss_fn_outputs[0].fields["logprobs"];
        assert_eq!(rec.data.len(), 12);
        assert_eq!(int32s(&[1, 0, 0, 0, 255, 255, 255, 255]), Some(vec![1, -1]));
        assert_eq!(int32s(&[1, 0, 0]), None);
        let t = Tensor {
            dense: Some(2.5f32.to_le_bytes().to_vec()),
            sparse_csr: None,
            dtype: DTYPE_FLOAT32,
            shape: vec![1],
        };
        assert_eq!(tensor_values(&t).unwrap(), vec![2.5]);
        let wrong_shape = Tensor {
            shape: vec![2],
            ..t.clone()
        };
        assert!(tensor_values(&wrong_shape).unwrap_err().contains("shape"));
        let wrong_dtype = Tensor { dtype: 9, ..t };
        assert!(tensor_values(&wrong_dtype).unwrap_err().contains("dtype"));
    }
}
