//! Streaming detokenization: a token can end in the middle of a UTF-8 character (byte-level BPE
//! pieces and SentencePiece byte-fallback tokens both do), and a client must never see half of
//! one.

use super::Tokenizer;

/// Turns a stream of token ids into text without ever splitting a UTF-8 character: bytes of
/// an incomplete character are held until the token that completes it arrives.
#[derive(Default)]
pub struct IncrementalDecoder {
    pending: Vec<u8>,
}

impl IncrementalDecoder {
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32, skip_special: bool) -> String {
        if !(skip_special && tokenizer.is_special(id)) {
            self.pending.extend_from_slice(tokenizer.token_bytes(id));
        }
        self.take_complete()
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[..valid]).expect("valid prefix"),
                    );
                    match e.error_len() {
                        // Incomplete character at the end: hold it for the next token.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        // Bytes no later token can complete: say so once and move on.
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whatever is still held, replacing an unfinished character with U+FFFD.
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned()
    }
}
