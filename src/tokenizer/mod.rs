//! PROVISIONAL (branch tokenizer-algos): a stand-in until the tokenizer branch's mod.rs lands;
//! only declares the per-algorithm modules and their error type. Replace with the real one.

pub mod plamo2;
pub mod rwkv;
pub mod spm;
pub mod trie;
pub mod ugm;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
}
