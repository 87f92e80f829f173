//! `tensor_buft_overrides`: `(pattern, target)` rules that send matching tensors to a chosen
//! buffer type, tested in order, the first match winning.
//!
//! Upstream compiles each pattern with C++ `std::regex` (ECMAScript grammar) and tests it with
//! `regex_search`, i.e. the pattern may match anywhere in the tensor name unless anchored. This
//! module does the same with the `regex` crate, whose syntax agrees with ECMAScript for what
//! override patterns use (literals, escapes such as `\.` and `\d`, classes, groups,
//! alternation, anchors, repetition). ECMAScript features the crate lacks (backreferences,
//! lookaround) are reported as invalid patterns. Every pattern is compiled up front, so an
//! invalid one is an error even if an earlier pattern would match every tensor (upstream
//! compiles lazily and throws only when it reaches the pattern).

use regex::Regex;
use thiserror::Error;

/// An override rule list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OverrideError {
    #[error("invalid tensor_buft_overrides pattern {pattern:?}: {reason}")]
    InvalidPattern { pattern: String, reason: String },
    #[error("invalid tensor override {0:?}: expected <tensor name pattern>=<buffer type>")]
    MissingEquals(String),
}

/// Compiled override rules.
#[derive(Debug, Clone)]
pub struct BuftOverrides<T> {
    rules: Vec<(Regex, T)>,
}

impl<T> BuftOverrides<T> {
    /// Compiles the rules in order; an invalid pattern is an error naming it.
    pub fn new<S: AsRef<str>>(
        rules: impl IntoIterator<Item = (S, T)>,
    ) -> Result<Self, OverrideError> {
        let rules = rules
            .into_iter()
            .map(|(pattern, target)| {
                let pattern = pattern.as_ref();
                Regex::new(pattern).map(|re| (re, target)).map_err(|e| {
                    OverrideError::InvalidPattern {
                        pattern: pattern.to_string(),
                        reason: e
                            .to_string()
                            .lines()
                            .last()
                            .unwrap_or("")
                            .trim()
                            .to_string(),
                    }
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(BuftOverrides { rules })
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The first rule whose pattern is found in `tensor_name`: its position, pattern and
    /// target.
    pub fn find_rule(&self, tensor_name: &str) -> Option<(usize, &str, &T)> {
        self.rules
            .iter()
            .enumerate()
            .find(|(_, (re, _))| re.is_match(tensor_name))
            .map(|(i, (re, target))| (i, re.as_str(), target))
    }

    /// The target of the first rule whose pattern is found in `tensor_name`.
    pub fn find(&self, tensor_name: &str) -> Option<&T> {
        self.find_rule(tensor_name).map(|(_, _, target)| target)
    }
}

/// Parses the command-line form of overrides (`-ot` / `LLAMA_ARG_OVERRIDE_TENSOR`), as
/// upstream's common/arg.cpp does: the value is split at every `,`, and each part at its first
/// `=` into `(pattern, buffer type name)`. A part without `=` is an error. (As upstream, a
/// pattern cannot contain `,`.)
pub fn parse_override_list(value: &str) -> Result<Vec<(String, String)>, OverrideError> {
    value
        .split(',')
        .map(|part| {
            part.split_once('=')
                .map(|(pattern, target)| (pattern.to_string(), target.to_string()))
                .ok_or_else(|| OverrideError::MissingEquals(part.to_string()))
        })
        .collect()
}
