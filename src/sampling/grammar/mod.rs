//! GBNF grammars: upstream's parser ([`parser`]), incremental matcher ([`matcher`]) and
//! grammar sampler state, including lazy grammars that wait for a trigger token or pattern.
//!
//! Where upstream aborts, these functions return an error and leave the state as it was:
//! - a token the grammar cannot accept (upstream throws out of `llama_grammar_accept_impl`,
//!   which terminates the process through the C API): [`GrammarError::Rejected`];
//! - an end-of-generation token before the grammar can end (`GGML_ABORT`):
//!   [`GrammarError::EarlyEndOfGeneration`];
//! - an invalid trigger pattern (`std::regex` throws): [`GrammarError::BadPattern`];
//! - apply/accept without a vocabulary (`GGML_ASSERT`): [`GrammarError::NoVocab`];
//! - a token id outside the vocabulary (`std::vector::at` throws): rejected in apply,
//!   [`GrammarError::TokenOutOfRange`] in accept;
//! - deep group nesting (upstream's recursion overflows the stack) and `{m,n}` with n < m
//!   (upstream loops ~2^64 times): parse errors.
//!
//! Grammar text must be valid UTF-8 ([`GrammarError::InvalidUtf8`]); upstream decodes invalid
//! bytes into arbitrary code points without complaint.

mod engine;
mod error;
#[doc(hidden)]
pub mod harness;
pub mod matcher;
pub mod parser;
pub mod sampler;
pub mod trigger;
pub mod utf8;
pub mod vocab;

pub use engine::{parse_grammar, Grammar, Triggers};
pub use error::GrammarError;
pub use sampler::{GrammarSampler, GrammarSpec};
pub use vocab::GrammarVocab;
