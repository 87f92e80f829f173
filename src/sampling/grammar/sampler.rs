//! The grammar sampler (upstream `llama_sampler_grammar`): apply sets the logit of every
//! token the grammar does not allow next to -inf; accept advances the grammar.

use std::sync::Arc;

use super::engine::{Grammar, Triggers};
use super::error::GrammarError;
use super::trigger::pattern_from_words;
use super::vocab::GrammarVocab;
use crate::sampling::{Candidates, Sampler};

/// What a grammar sampler is built from (upstream `llama_sampler_init_grammar_impl`).
#[derive(Clone, Debug, Default)]
pub struct GrammarSpec<'a> {
    /// GBNF text; `None` or empty gives a sampler that does nothing (as upstream).
    pub text: Option<&'a [u8]>,
    pub root: Option<&'a str>,
    pub lazy: bool,
    /// Trigger words (deprecated upstream): turned into one pattern, as upstream does.
    pub trigger_words: &'a [&'a str],
    pub trigger_patterns: &'a [&'a str],
    pub trigger_tokens: &'a [i32],
}

#[derive(Clone, Debug)]
pub struct GrammarSampler {
    grammar: Option<Grammar>,
}

impl GrammarSampler {
    pub fn new(
        vocab: Option<Arc<GrammarVocab>>,
        spec: &GrammarSpec<'_>,
    ) -> Result<GrammarSampler, GrammarError> {
        let Some(text) = spec.text.filter(|t| t.first().is_some_and(|&b| b != 0)) else {
            return Ok(GrammarSampler { grammar: None });
        };
        // Upstream would build a std::string from a NULL root (undefined behaviour).
        let root = spec
            .root
            .ok_or(GrammarError::NoRoot("(NULL)".to_string()))?;
        // Upstream accepts a NULL vocab here and asserts in apply/accept; we refuse early.
        let vocab = vocab.ok_or(GrammarError::NoVocab)?;
        let word_pattern;
        let patterns: Vec<&str> = if spec.trigger_words.is_empty() {
            spec.trigger_patterns.to_vec()
        } else {
            word_pattern = pattern_from_words(spec.trigger_words);
            vec![word_pattern.as_str()]
        };
        let grammar = Grammar::new(
            Some(vocab),
            text,
            root,
            Triggers {
                lazy: spec.lazy,
                patterns: &patterns,
                tokens: spec.trigger_tokens,
            },
        )?;
        Ok(GrammarSampler {
            grammar: Some(grammar),
        })
    }

    pub fn grammar(&self) -> Option<&Grammar> {
        self.grammar.as_ref()
    }
}

impl Sampler for GrammarSampler {
    fn name(&self) -> &str {
        "grammar"
    }

    fn accept(&mut self, token: i32) {
        if let Some(grammar) = &mut self.grammar {
            if let Err(e) = grammar.accept(token) {
                // upstream aborts here; we keep the grammar as it was before this token
                crate::log_error!("grammar sampler: {e}; token not accepted");
            }
        }
    }

    fn apply(&mut self, cur: &mut Candidates) {
        let Some(grammar) = &self.grammar else {
            return;
        };
        let mut rejected = Vec::new();
        let data = cur.data();
        if let Err(e) = grammar.apply(data.len(), |i| data[i].id, |i| rejected.push(i)) {
            crate::log_error!("grammar sampler: {e}");
            return;
        }
        let data = cur.data_mut();
        for i in rejected {
            data[i].logit = f32::NEG_INFINITY;
        }
    }

    fn reset(&mut self) {
        if let Some(grammar) = &mut self.grammar {
            grammar.reset();
        }
    }

    fn clone_sampler(&self) -> Option<Box<dyn Sampler>> {
        Some(Box::new(self.clone()))
    }
}
