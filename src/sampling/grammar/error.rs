//! Why a grammar call failed ([`GrammarError`]); see the module doc for where upstream aborts
//! instead.

#[derive(Debug, thiserror::Error)]
pub enum GrammarError {
    #[error("error parsing grammar: {0}")]
    Parse(String),
    #[error("grammar text is not valid UTF-8 (at byte {0})")]
    InvalidUtf8(usize),
    #[error("failed to parse grammar: it has no rules")]
    NoRules,
    #[error("grammar does not contain a '{0}' symbol")]
    NoRoot(String),
    #[error("invalid grammar: rule {rule} references undefined rule {target}")]
    UndefinedRule { rule: usize, target: u32 },
    #[error(
        "invalid grammar: rule {0} is malformed (missing END, or a char-set element out of place)"
    )]
    MalformedRule(usize),
    #[error("unsupported grammar, left recursion detected for nonterminal at index {0}")]
    LeftRecursion(usize),
    #[error("invalid trigger pattern '{pattern}': {reason}")]
    BadPattern { pattern: String, reason: String },
    #[error("the grammar cannot accept token {token} (piece {piece:?}) here")]
    Rejected { token: i32, piece: String },
    #[error("end-of-generation token {0} accepted before the grammar is complete")]
    EarlyEndOfGeneration(i32),
    #[error("token {0} is outside the vocabulary")]
    TokenOutOfRange(i32),
    #[error("the grammar has no vocabulary to read token pieces from")]
    NoVocab,
}
