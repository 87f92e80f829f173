//! What the grammar needs from a vocabulary: each token's piece (upstream's cached
//! `token_to_piece(id)`, special tokens rendered), the end-of-generation set, and resolution
//! of `<text>` token references (upstream tokenizes the text with special tokens parsed and
//! wants exactly one token).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::parser::TokenResolver;
use crate::model::vocab::Vocab;

/// The grammar's view of a vocabulary.
#[derive(Clone, Default)]
pub struct GrammarVocab {
    pieces: Vec<Vec<u8>>,
    eog: HashSet<i32>,
    /// Texts declared special by hand (tests, callers without a model) → id.
    special: HashMap<Vec<u8>, i32>,
    /// The model's tokenizer for `<text>` references (tokenize with `parse_special`).
    tokenizer: Option<Arc<dyn TokenResolver + Send + Sync>>,
}

impl std::fmt::Debug for GrammarVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarVocab")
            .field("n_tokens", &self.pieces.len())
            .field("eog", &self.eog)
            .finish()
    }
}

impl GrammarVocab {
    /// A vocabulary given piece by piece (tests, and callers without a model).
    pub fn new(pieces: Vec<Vec<u8>>, eog: impl IntoIterator<Item = i32>) -> GrammarVocab {
        GrammarVocab {
            pieces,
            eog: eog.into_iter().collect(),
            special: HashMap::new(),
            tokenizer: None,
        }
    }

    /// Declares `text` a special token `id` that `<text>` in a grammar resolves to.
    pub fn with_special(mut self, text: &[u8], id: i32) -> GrammarVocab {
        self.special.insert(text.to_vec(), id);
        self
    }

    /// The grammar's view of a model's vocabulary: the tokenizer's cached pieces (as
    /// upstream's `vocab->token_to_piece(id)`), and `tokenizer` to resolve `<text>`.
    pub fn from_vocab(
        vocab: &Vocab,
        tokenizer: Arc<dyn TokenResolver + Send + Sync>,
    ) -> GrammarVocab {
        let pieces = (0..vocab.tokens.len() as i32)
            .map(|id| {
                crate::tokenizer::piece(vocab, id)
                    .unwrap_or_default()
                    .to_vec()
            })
            .collect();
        GrammarVocab {
            pieces,
            eog: vocab.eog.iter().copied().collect(),
            special: HashMap::new(),
            tokenizer: Some(tokenizer),
        }
    }

    pub fn n_tokens(&self) -> usize {
        self.pieces.len()
    }

    /// The piece of `id`; `None` outside the vocabulary.
    pub fn piece(&self, id: i32) -> Option<&[u8]> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.pieces.get(i))
            .map(Vec::as_slice)
    }

    pub fn is_eog(&self, id: i32) -> bool {
        self.eog.contains(&id)
    }
}

impl TokenResolver for GrammarVocab {
    /// Through the model's tokenizer when there is one, else the declared special texts.
    fn single_token(&self, text: &[u8]) -> Option<i32> {
        match &self.tokenizer {
            Some(t) => t.single_token(text),
            None => self.special.get(text).copied(),
        }
    }
}

/// `<text>` resolution with a model's tokenizer, as upstream's `parse_token`: `text`
/// tokenized with `add_special = false, parse_special = true` must give exactly one token.
pub fn single_token_of(
    tokenizer: &crate::tokenizer::Tokenizer,
    vocab: &Vocab,
    text: &[u8],
) -> Option<i32> {
    match tokenizer.tokenize(vocab, text, false, true) {
        Ok(ids) if ids.len() == 1 => Some(ids[0]),
        _ => None,
    }
}
