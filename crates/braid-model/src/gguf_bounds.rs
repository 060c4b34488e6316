//! A GGUF file's structure checked against its own size before anything is allocated for it.
//!
//! candle's reader trusts the header: an alignment of 0 divides by zero, a u8 array of a
//! billion entries becomes a billion 32-byte values, a tensor claiming 2^40 elements is
//! allocated before its data is found missing. A model file is often downloaded from strangers,
//! so this walk reads only lengths and counts (skipping the bytes they describe) and refuses,
//! naming the field and its value, any that cannot fit in the file or would cost memory out of
//! proportion to it. What passes is then read by candle.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use candle_core::quantized::GgmlDType;

use crate::error::{ModelError, Result};

/// Metadata entries and tensors: llama.cpp's largest models have a few thousand of each.
const MAX_ENTRIES: u64 = 1 << 16;
/// Elements of all metadata arrays together. candle holds each as a value of about 32 bytes,
/// so this bounds the metadata at about 512 MB; a 262k-token vocabulary with its scores,
/// types and merges is about 1.3M.
const MAX_ARRAY_ELEMENTS: u64 = 1 << 24;
/// One string (a chat template, a token, a key).
const MAX_STRING: u64 = 64 << 20;
/// Elements of one tensor.
const MAX_TENSOR_ELEMENTS: u64 = 1 << 36;
const MAX_DIMS: u32 = 4;
const MAX_ALIGNMENT: u64 = 1 << 20;

/// GGUF's metadata value types.
const U8: u32 = 0;
const I8: u32 = 1;
const U16: u32 = 2;
const I16: u32 = 3;
const U32: u32 = 4;
const I32: u32 = 5;
const F32: u32 = 6;
const BOOL: u32 = 7;
const STRING: u32 = 8;
const ARRAY: u32 = 9;
const U64: u32 = 10;
const I64: u32 = 11;
const F64: u32 = 12;

/// ggml's tensor type ids (those candle reads).
fn ggml_type(id: u32) -> Option<GgmlDType> {
    Some(match id {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        9 => GgmlDType::Q8_1,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        15 => GgmlDType::Q8K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}

/// Checks the file at `path` (see the module docs).
pub fn check(path: &Path) -> Result<()> {
    let corrupt = |reason: String| ModelError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut walk = Walk {
        r: BufReader::new(file),
        len,
        pos: 0,
        array_elements: 0,
    };
    walk.header().map_err(corrupt)
}

struct Walk {
    r: BufReader<File>,
    len: u64,
    /// Bytes read or skipped so far.
    pos: u64,
    array_elements: u64,
}

type Check<T> = std::result::Result<T, String>;

impl Walk {
    fn header(&mut self) -> Check<()> {
        let mut magic = [0u8; 4];
        self.bytes(&mut magic, "the magic")?;
        if &magic != b"GGUF" {
            return Err("it does not start with the GGUF magic".into());
        }
        let version = self.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(format!(
                "GGUF version {version}; braid reads versions 2 and 3"
            ));
        }
        let tensors = self.count("the tensor count", MAX_ENTRIES)?;
        let entries = self.count("the metadata entry count", MAX_ENTRIES)?;
        let mut alignment = 32;
        for _ in 0..entries {
            let key = self.string("a metadata key")?;
            let ty = self.u32(&key)?;
            if key == "general.alignment" {
                if ty != U32 {
                    return Err(format!("general.alignment has type {ty}; it must be a u32"));
                }
                alignment = u64::from(self.u32(&key)?);
                if alignment == 0 || !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
                    return Err(format!(
                        "general.alignment is {alignment}; it must be a power of two up to {MAX_ALIGNMENT}"
                    ));
                }
            } else {
                self.value(&key, ty, true)?;
            }
        }
        let mut infos = Vec::new();
        for _ in 0..tensors {
            let name = self.string("a tensor name")?;
            let dims = self.u32(&name)?;
            if dims == 0 || dims > MAX_DIMS {
                return Err(format!(
                    "tensor `{name}` has {dims} dimensions; braid reads 1 to {MAX_DIMS}"
                ));
            }
            let mut elements: u64 = 1;
            for _ in 0..dims {
                let d = self.u64(&name)?;
                elements = elements
                    .checked_mul(d)
                    .filter(|&e| e <= MAX_TENSOR_ELEMENTS)
                    .ok_or_else(|| {
                        format!("tensor `{name}` claims more than {MAX_TENSOR_ELEMENTS} elements")
                    })?;
            }
            let ty = self.u32(&name)?;
            let dtype =
                ggml_type(ty).ok_or_else(|| format!("tensor `{name}` has unknown type {ty}"))?;
            let block = dtype.block_size() as u64;
            if !elements.is_multiple_of(block) {
                return Err(format!(
                    "tensor `{name}` has {elements} elements, not whole blocks of {block} ({dtype:?})"
                ));
            }
            let bytes = elements / block * dtype.type_size() as u64;
            let offset = self.u64(&name)?;
            infos.push((name, offset, bytes));
        }
        let data = self.pos.div_ceil(alignment) * alignment;
        for (name, offset, bytes) in infos {
            if !offset.is_multiple_of(alignment) {
                return Err(format!(
                    "tensor `{name}` starts at offset {offset}, not a multiple of the alignment {alignment}"
                ));
            }
            let end = data.checked_add(offset).and_then(|s| s.checked_add(bytes));
            if end.is_none_or(|end| end > self.len) {
                return Err(format!(
                    "tensor `{name}` ({bytes} bytes at offset {offset}) ends past the file's {} bytes",
                    self.len
                ));
            }
        }
        Ok(())
    }

    /// Skips one value of type `ty` (an array only at the top level: GGUF files do not nest
    /// them, and candle would recurse).
    fn value(&mut self, key: &str, ty: u32, top: bool) -> Check<()> {
        match ty {
            U8 | I8 | BOOL => self.skip(1, key),
            U16 | I16 => self.skip(2, key),
            U32 | I32 | F32 => self.skip(4, key),
            U64 | I64 | F64 => self.skip(8, key),
            STRING => self.string(key).map(drop),
            ARRAY if top => {
                let elem = self.u32(key)?;
                let count = self.u64(key)?;
                let least = match elem {
                    U8 | I8 | BOOL => 1,
                    U16 | I16 => 2,
                    U32 | I32 | F32 => 4,
                    U64 | I64 | F64 | STRING => 8,
                    _ => return Err(format!("`{key}` is an array of type {elem}")),
                };
                self.array_elements = self.array_elements.saturating_add(count);
                if count.saturating_mul(least) > self.left()
                    || self.array_elements > MAX_ARRAY_ELEMENTS
                {
                    return Err(format!(
                        "`{key}` claims {count} entries, more than the file holds or braid reads ({MAX_ARRAY_ELEMENTS} in all)"
                    ));
                }
                match elem {
                    STRING => (0..count).try_for_each(|_| self.string(key).map(drop)),
                    _ => self.skip(count * least, key),
                }
            }
            ARRAY => Err(format!("`{key}` is an array of arrays")),
            _ => Err(format!("`{key}` has unknown value type {ty}")),
        }
    }

    fn left(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn skip(&mut self, n: u64, what: &str) -> Check<()> {
        if n > self.left() {
            return Err(format!("the file ends inside {what}"));
        }
        self.r.seek_relative(n as i64).map_err(|e| e.to_string())?;
        self.pos += n;
        Ok(())
    }

    fn bytes(&mut self, buf: &mut [u8], what: &str) -> Check<()> {
        self.r
            .read_exact(buf)
            .map_err(|_| format!("the file ends inside {what}"))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn u32(&mut self, what: &str) -> Check<u32> {
        let mut b = [0u8; 4];
        self.bytes(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self, what: &str) -> Check<u64> {
        let mut b = [0u8; 8];
        self.bytes(&mut b, what)?;
        Ok(u64::from_le_bytes(b))
    }

    fn count(&mut self, what: &str, max: u64) -> Check<u64> {
        let n = self.u64(what)?;
        if n > max {
            return Err(format!("{what} is {n}; braid reads at most {max}"));
        }
        Ok(n)
    }

    /// A string's text: keys and names are read (for messages); nothing else is.
    fn string(&mut self, what: &str) -> Check<String> {
        let n = self.u64(what)?;
        if n > MAX_STRING || n > self.left() {
            return Err(format!("{what} claims a string of {n} bytes"));
        }
        if n > 256 {
            self.skip(n, what)?;
            return Ok(format!("<{n}-byte string>"));
        }
        let mut buf = vec![0u8; n as usize];
        self.bytes(&mut buf, what)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}
