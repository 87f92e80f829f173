//! Why a tokenizer could not be built or could not run ([`TokenizerError`]), shared by the
//! per-algorithm files.

/// Why a tokenizer could not be built or could not run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenizerError {
    #[error("the {0} tokenizer is not supported by llama-hotswap yet")]
    Unsupported(&'static str),
    #[error("the model has no vocabulary (type NONE)")]
    NoVocab,
    #[error("add_special asks for the {0} token but the vocabulary has none")]
    MissingSpecial(&'static str),
    #[error("token id {0} out of range")]
    TokenOutOfRange(i32),
    #[error("{0}")]
    Invalid(String),
}
