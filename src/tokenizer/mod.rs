//! Tokenization as upstream's `llama_vocab::impl` does it (src/llama-vocab.cpp): special-token
//! partitioning with lstrip/rstrip, space prefix, BOS/EOS/SEP by the vocab's flags, dispatch to
//! one algorithm per vocab type (one file each), `token_to_piece` and `detokenize` with their
//! clean-up rules. A [`Tokenizer`] is built once per model at load ([`load_vocab`]) and is
//! immutable afterwards, so any number of threads may use it at once.
//!
//! Text is bytes, as upstream's `std::string`: invalid UTF-8 is tokenized the way upstream
//! tokenizes it, not rejected.

pub mod bpe;
mod error;
#[cfg(any(test, feature = "fixtures"))]
pub mod harness;
pub mod plamo2;
pub mod rwkv;
pub mod spm;
#[cfg(test)]
mod test_util;
pub mod trie;
pub mod ugm;
pub mod unicode;
pub mod wpm;

pub use error::TokenizerError;

use crate::model::meta::Metadata;
use crate::model::vocab::{
    Vocab, ATTR_BYTE, ATTR_CONTROL, ATTR_LSTRIP, ATTR_NORMAL, ATTR_RSTRIP, ATTR_UNKNOWN,
    ATTR_USER_DEFINED, TOKEN_NULL, VOCAB_BPE, VOCAB_NONE, VOCAB_PLAMO2, VOCAB_RWKV, VOCAB_SPM,
    VOCAB_TEST, VOCAB_UGM, VOCAB_WPM,
};

/// The algorithm for one vocab type.
enum Algo {
    Bpe(bpe::BpeTokenizer),
    Spm(Box<spm::SpmTokenizer>),
    Wpm(wpm::WpmTokenizer),
    Ugm(ugm::UgmTokenizer),
    Rwkv(rwkv::RwkvTokenizer),
    Plamo2(Box<plamo2::Plamo2Tokenizer>),
    /// TEST: rolling hash over 5-byte chunks, no state.
    Test,
    /// The vocab type's tokenizer could not be built (or is not implemented); every call
    /// reports this.
    Failed(TokenizerError),
}

/// A model's tokenizer, built once at load.
pub struct Tokenizer {
    algo: Algo,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match &self.algo {
            Algo::Bpe(_) => "BPE",
            Algo::Spm(_) => "SPM",
            Algo::Wpm(_) => "WPM",
            Algo::Ugm(_) => "UGM",
            Algo::Rwkv(_) => "RWKV",
            Algo::Plamo2(_) => "PLaMo2",
            Algo::Test => "TEST",
            Algo::Failed(_) => "failed",
        };
        f.debug_struct("Tokenizer").field("algo", &name).finish()
    }
}

/// One piece of the text after special-token partitioning: a token, or a byte range of the
/// raw text.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fragment {
    Token(i32),
    Raw { offset: usize, len: usize },
}

/// Loads the vocabulary ([`Vocab::load`]) and builds its tokenizer ([`attach`]).
pub fn load_vocab(meta: &Metadata) -> Result<(Vocab, Tokenizer), String> {
    let mut vocab = Vocab::load(meta)?;
    let tokenizer = attach(&mut vocab)?;
    Ok((vocab, tokenizer))
}

/// Builds the tokenizer of a loaded vocabulary and finishes the vocabulary with what upstream
/// derives through it at load: the newline token (upstream tokenizes "\n" before any special
/// token is known, so this tokenization skips the special-token partition) and the piece of
/// every token (`cache_token_to_piece`). A tokenizer that cannot be built does not fail
/// (the model's other uses keep working); its calls report why. RWKV without a newline
/// token fails, as upstream's assertion does.
pub fn attach(vocab: &mut Vocab) -> Result<Tokenizer, String> {
    if vocab.vocab_type == VOCAB_NONE {
        return Ok(Tokenizer {
            algo: Algo::Failed(TokenizerError::NoVocab),
        });
    }
    let tokenizer = Tokenizer::new(vocab);
    if let Algo::Failed(e) = &tokenizer.algo {
        crate::log_warn!("tokenizer: {e}");
        return Ok(tokenizer);
    }
    if !matches!(vocab.vocab_type, VOCAB_SPM | VOCAB_WPM) {
        match tokenizer.tokenize_impl(vocab, b"\n", false, false, false) {
            Ok(ids) if !ids.is_empty() => vocab.specials.nl = ids[0],
            Ok(_) if vocab.vocab_type == VOCAB_RWKV => {
                return Err("model vocab missing newline token".to_string());
            }
            Ok(_) => {
                crate::log_warn!("model vocab missing newline token, using special_pad_id instead");
                vocab.specials.nl = vocab.linefeed_fallback;
            }
            Err(e) => crate::log_warn!("tokenizer: newline token: {e}"),
        }
    }
    let mut cache = Vec::with_capacity(vocab.tokens.len());
    for id in 0..vocab.tokens.len() as i32 {
        cache.push(piece_uncached(vocab, id, true).map_err(|e| e.to_string())?);
    }
    vocab.cache_token_to_piece = cache;
    Ok(tokenizer)
}

impl Tokenizer {
    /// `init_tokenizer`: the algorithm for the vocab's type.
    pub fn new(vocab: &Vocab) -> Tokenizer {
        let algo = match vocab.vocab_type {
            VOCAB_BPE => bpe::BpeTokenizer::new(vocab).map(Algo::Bpe),
            VOCAB_TEST => Ok(Algo::Test),
            VOCAB_SPM => spm::SpmTokenizer::new(vocab).map(|t| Algo::Spm(Box::new(t))),
            VOCAB_WPM => wpm::WpmTokenizer::new(vocab).map(Algo::Wpm),
            VOCAB_UGM => ugm::UgmTokenizer::new(vocab).map(Algo::Ugm),
            VOCAB_RWKV => rwkv::RwkvTokenizer::new(vocab).map(Algo::Rwkv),
            VOCAB_PLAMO2 => plamo2::Plamo2Tokenizer::new(vocab).map(|t| Algo::Plamo2(Box::new(t))),
            VOCAB_NONE => Err(TokenizerError::NoVocab),
            _ => Err(TokenizerError::Invalid(format!(
                "unknown vocab type {}",
                vocab.vocab_type
            ))),
        };
        Tokenizer {
            algo: algo.unwrap_or_else(Algo::Failed),
        }
    }

    /// Whether tokenization works for this model (false: every call returns the reason).
    pub fn is_ready(&self) -> bool {
        !matches!(self.algo, Algo::Failed(_))
    }

    /// Upstream's `llama_vocab::impl::tokenize`.
    pub fn tokenize(
        &self,
        vocab: &Vocab,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<i32>, TokenizerError> {
        self.tokenize_impl(vocab, text, add_special, parse_special, true)
    }

    /// `tokenize`, optionally without the special-token partition (upstream's state while
    /// it loads: its special-token cache is still empty).
    fn tokenize_impl(
        &self,
        vocab: &Vocab,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
        with_specials: bool,
    ) -> Result<Vec<i32>, TokenizerError> {
        if let Algo::Failed(e) = &self.algo {
            return Err(e.clone());
        }
        let fragments = if text.is_empty() {
            Vec::new()
        } else if with_specials {
            partition(vocab, text, parse_special)
        } else {
            vec![Fragment::Raw {
                offset: 0,
                len: text.len(),
            }]
        };
        let mut output = Vec::new();
        let raw = |offset: usize, len: usize| &text[offset..offset + len];
        let need = |id: i32, what: &'static str| {
            if id == TOKEN_NULL {
                Err(TokenizerError::MissingSpecial(what))
            } else {
                Ok(id)
            }
        };
        let s = vocab.specials;
        match &self.algo {
            Algo::Bpe(bpe) => {
                if add_special && vocab.add_bos {
                    output.push(need(s.bos, "BOS")?);
                }
                let mut escaped = Vec::new();
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Raw { offset, len } => {
                            let mut piece = raw(offset, len);
                            if vocab.escape_whitespaces {
                                escaped.clear();
                                escape_whitespace(piece, &mut escaped);
                                piece = &escaped;
                            }
                            bpe.tokenize(vocab, piece, &mut output)?;
                        }
                        Fragment::Token(id) => output.push(id),
                    }
                }
                if add_special {
                    if vocab.add_eos {
                        output.push(need(s.eos, "EOS")?);
                    }
                    warn_double_bos_eos(vocab, &output);
                }
            }
            Algo::Spm(spm) => {
                // Upstream prefixes a space to the first fragment and to every fragment after
                // a special token.
                let mut is_prev_special = true;
                if add_special && vocab.add_bos {
                    output.push(need(s.bos, "BOS")?);
                }
                let mut text = Vec::new();
                let mut escaped = Vec::new();
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Raw { offset, len } => {
                            text.clear();
                            if vocab.add_space_prefix && is_prev_special {
                                text.push(b' ');
                            }
                            text.extend_from_slice(raw(offset, len));
                            escaped.clear();
                            escape_whitespace(&text, &mut escaped);
                            spm.tokenize_bytes(vocab, &escaped, &mut output);
                            is_prev_special = false;
                        }
                        Fragment::Token(id) => {
                            output.push(id);
                            is_prev_special = true;
                        }
                    }
                }
                if add_special && vocab.add_bos {
                    warn_double_bos(vocab, &output);
                }
                if add_special && vocab.add_eos {
                    output.push(need(s.eos, "EOS")?);
                }
            }
            Algo::Wpm(wpm) => {
                // WPM adds BOS and SEP whatever the add_bos/add_sep flags say, as upstream.
                if add_special {
                    output.push(need(s.bos, "BOS")?);
                }
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Raw { offset, len } => {
                            wpm.tokenize_bytes(vocab, raw(offset, len), &mut output)
                        }
                        Fragment::Token(id) => output.push(id),
                    }
                }
                if add_special {
                    output.push(need(s.sep, "SEP")?);
                }
            }
            Algo::Ugm(ugm) => {
                if add_special && vocab.add_bos {
                    output.push(need(s.bos, "BOS")?);
                }
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Raw { offset, len } => {
                            ugm.tokenize_bytes(vocab, raw(offset, len), &mut output)
                        }
                        Fragment::Token(id) => output.push(id),
                    }
                }
                if add_special && vocab.add_bos {
                    warn_double_bos(vocab, &output);
                }
                if add_special && vocab.add_eos {
                    output.push(need(s.eos, "EOS")?);
                }
            }
            Algo::Rwkv(rwkv) => {
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Raw { offset, len } => {
                            rwkv.tokenize_bytes(vocab, raw(offset, len), &mut output)
                        }
                        Fragment::Token(id) => output.push(id),
                    }
                }
            }
            Algo::Plamo2(plamo2) => {
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Raw { offset, len } => {
                            plamo2.tokenize_bytes(vocab, raw(offset, len), &mut output)
                        }
                        Fragment::Token(id) => output.push(id),
                    }
                }
            }
            Algo::Test => {
                let n_vocab = vocab.tokens.len() as u64;
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Raw { offset, len } => {
                            for chunk in raw(offset, len).chunks(5) {
                                let hash = chunk.iter().fold(0u64, |h, &b| {
                                    h.wrapping_mul(31).wrapping_add(u64::from(b))
                                });
                                // n_vocab > 0: a TEST vocab with no tokens has nothing to hash into.
                                output.push(hash.checked_rem(n_vocab).unwrap_or(0) as i32);
                            }
                        }
                        Fragment::Token(id) => output.push(id),
                    }
                }
            }
            Algo::Failed(e) => return Err(e.clone()),
        }
        Ok(output)
    }
}

/// SPM's and UGM's warning (upstream checks only BOS there).
fn warn_double_bos(vocab: &Vocab, output: &[i32]) {
    if output.len() >= 2 && output[1] == vocab.specials.bos {
        crate::log_warn!(
            "Added a BOS token to the prompt as specified by the model but the prompt also \
             starts with a BOS token. So now the final prompt starts with 2 BOS tokens. Are you \
             sure this is what you want?"
        );
    }
}

fn warn_double_bos_eos(vocab: &Vocab, output: &[i32]) {
    if vocab.add_bos && output.len() >= 2 && output[1] == vocab.specials.bos {
        crate::log_warn!(
            "Added a BOS token to the prompt as specified by the model but the prompt also \
             starts with a BOS token. So now the final prompt starts with 2 BOS tokens. Are you \
             sure this is what you want?"
        );
    }
    if vocab.add_eos && output.len() >= 2 && output[output.len() - 2] == vocab.specials.eos {
        crate::log_warn!(
            "Added a EOS token to the prompt as specified by the model but the prompt also ends \
             with a EOS token. So now the final prompt ends with 2 EOS tokens. Are you sure this \
             is what you want?"
        );
    }
}

/// C's `isspace` in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// `tokenizer_st_partition`: splits the text at every occurrence of each special token
/// (longest first; control and unknown tokens only with `parse_special`), trimming the
/// whitespace an lstrip/rstrip token swallows.
fn partition(vocab: &Vocab, text: &[u8], parse_special: bool) -> Vec<Fragment> {
    let mut fragments = vec![Fragment::Raw {
        offset: 0,
        len: text.len(),
    }];
    let mut next = Vec::new();
    for &special_id in &vocab.cache_special_tokens {
        let token = &vocab.tokens[special_id as usize];
        if !parse_special && token.attr & (ATTR_CONTROL | ATTR_UNKNOWN) != 0 {
            continue;
        }
        let needle = token.bytes();
        if needle.is_empty() {
            continue;
        }
        let finder = memchr::memmem::Finder::new(needle);
        let mut changed = false;
        next.clear();
        for &fragment in &fragments {
            let Fragment::Raw { offset, len } = fragment else {
                next.push(fragment);
                continue;
            };
            let (mut base, mut base_len) = (offset, len);
            while let Some(found) = finder.find(&text[base..base + base_len]) {
                changed = true;
                let m = base + found;
                let mut left_len = m - base;
                if token.attr & ATTR_LSTRIP != 0 {
                    while left_len > 0 && is_c_space(text[base + left_len - 1]) {
                        left_len -= 1;
                    }
                }
                if left_len > 0 {
                    next.push(Fragment::Raw {
                        offset: base,
                        len: left_len,
                    });
                }
                next.push(Fragment::Token(special_id));
                let end = base + base_len;
                if m + needle.len() < end {
                    let mut right = m + needle.len();
                    if token.attr & ATTR_RSTRIP != 0 {
                        while right < end && is_c_space(text[right]) {
                            right += 1;
                        }
                    }
                    (base, base_len) = (right, end - right);
                } else {
                    base_len = 0;
                    break;
                }
            }
            if base_len > 0 {
                next.push(Fragment::Raw {
                    offset: base,
                    len: base_len,
                });
            }
        }
        if changed {
            std::mem::swap(&mut fragments, &mut next);
        }
    }
    fragments
}

/// `llama_escape_whitespace`: every ' ' becomes U+2581.
pub fn escape_whitespace(text: &[u8], out: &mut Vec<u8>) {
    for &b in text {
        if b == b' ' {
            out.extend_from_slice("\u{2581}".as_bytes());
        } else {
            out.push(b);
        }
    }
}

/// `llama_unescape_whitespace`: every U+2581 becomes ' '.
pub fn unescape_whitespace(text: &[u8]) -> Vec<u8> {
    let marker = "\u{2581}".as_bytes();
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with(marker) {
            out.push(b' ');
            i += marker.len();
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

/// `llama_decode_text`: GPT-2 byte characters back to bytes; a character outside the map
/// becomes `[UNK_BYTE_0x<its utf8 in hex><the whole text>]`, as upstream writes it.
fn decode_text(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for cpt in unicode::cpts_from_utf8(text) {
        let byte = char::from_u32(cpt).and_then(crate::model::vocab::unicode_to_byte);
        match byte {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in unicode::cpt_to_utf8(cpt).unwrap_or_default() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text);
                out.push(b']');
            }
        }
    }
    out
}

/// The piece of a token as upstream computes it before its cache exists (`token_to_piece`
/// with an empty `cache_token_to_piece`, lstrip 0).
fn piece_uncached(vocab: &Vocab, id: i32, special: bool) -> Result<Vec<u8>, TokenizerError> {
    let token = vocab.token(id).ok_or(TokenizerError::TokenOutOfRange(id))?;
    let attr = token.attr;
    let attr_special = ATTR_UNKNOWN | ATTR_CONTROL;
    if !special && attr & attr_special != 0 {
        return Ok(Vec::new());
    }
    let text = token.bytes();
    let byte = |vocab: &Vocab| {
        vocab
            .token_to_byte(id)
            .map(|b| vec![b])
            .ok_or(TokenizerError::Invalid(format!(
                "token {id} is not a byte token"
            )))
    };
    Ok(match vocab.vocab_type {
        VOCAB_WPM | VOCAB_SPM | VOCAB_UGM => {
            if attr & (attr_special | ATTR_USER_DEFINED) != 0 {
                text.to_vec()
            } else if attr & ATTR_NORMAL != 0 {
                unescape_whitespace(text)
            } else if attr & ATTR_BYTE != 0 {
                byte(vocab)?
            } else {
                Vec::new()
            }
        }
        VOCAB_BPE => {
            if attr & (attr_special | ATTR_USER_DEFINED) != 0 {
                text.to_vec()
            } else if attr & ATTR_NORMAL != 0 {
                if vocab.escape_whitespaces {
                    unescape_whitespace(text)
                } else {
                    decode_text(text)
                }
            } else if attr & ATTR_BYTE != 0 {
                byte(vocab)?
            } else {
                Vec::new()
            }
        }
        VOCAB_RWKV => rwkv::unescape_token(text),
        VOCAB_TEST => format!("{id:x}").into_bytes(),
        VOCAB_PLAMO2 => {
            let hex = |c: u8| c.is_ascii_hexdigit();
            if attr & ATTR_BYTE != 0
                && text.len() == 6
                && text.starts_with(b"<0x")
                && text[5] == b'>'
                && hex(text[3])
                && hex(text[4])
            {
                let s = std::str::from_utf8(&text[3..5]).unwrap_or("0");
                vec![u8::from_str_radix(s, 16).unwrap_or(0)]
            } else {
                text.to_vec()
            }
        }
        _ => return Err(TokenizerError::NoVocab),
    })
}

/// Upstream's `token_to_piece` into `buf`: the cached piece (or nothing for a control or
/// unknown token without `special`), skipping up to `lstrip` leading spaces; its length, or
/// minus its length when `buf` is too small (nothing written then).
pub fn token_to_piece(
    vocab: &Vocab,
    id: i32,
    buf: &mut [u8],
    lstrip: i32,
    special: bool,
) -> Result<i32, TokenizerError> {
    if vocab.vocab_type == VOCAB_NONE {
        return Err(TokenizerError::NoVocab);
    }
    let token = vocab.token(id).ok_or(TokenizerError::TokenOutOfRange(id))?;
    if !special && token.attr & (ATTR_UNKNOWN | ATTR_CONTROL) != 0 {
        return Ok(0);
    }
    let piece = vocab
        .cache_token_to_piece
        .get(id as usize)
        .ok_or(TokenizerError::Unsupported(
            "token_to_piece without a tokenizer",
        ))?;
    let mut piece = piece.as_slice();
    let mut i = 0;
    while i < lstrip && piece.first() == Some(&b' ') {
        piece = &piece[1..];
        i += 1;
    }
    let size = i32::try_from(piece.len())
        .map_err(|_| TokenizerError::Invalid("piece longer than INT32_MAX".into()))?;
    if buf.len() < piece.len() {
        return Ok(-size);
    }
    buf[..piece.len()].copy_from_slice(piece);
    Ok(size)
}

/// The cached piece of a token (`token_to_piece(token)`), special tokens included.
pub fn piece(vocab: &Vocab, id: i32) -> Option<&[u8]> {
    vocab
        .cache_token_to_piece
        .get(usize::try_from(id).ok()?)
        .map(Vec::as_slice)
}

/// Upstream's `detokenize` into `text` (its length is `text_len_max`): the pieces, with
/// BOS/EOS removed under `remove_special`, special tokens rendered under `unparse_special`,
/// the leading space of a space-prefixed vocab dropped, and `clean_spaces` applied. Its length,
/// or minus the length needed when `text` is too small (then `text` holds what fit, as
/// upstream leaves it).
pub fn detokenize(
    vocab: &Vocab,
    tokens: &[i32],
    text: &mut [u8],
    remove_special: bool,
    unparse_special: bool,
) -> Result<i32, TokenizerError> {
    if vocab.vocab_type == VOCAB_NONE {
        return Ok(0);
    }
    if let Some(&bad) = tokens.iter().find(|&&t| vocab.token(t).is_none()) {
        return Err(TokenizerError::TokenOutOfRange(bad));
    }
    let text_len_max = i32::try_from(text.len()).unwrap_or(i32::MAX);
    let mut tokens = tokens;
    let mut remove_space = vocab.add_space_prefix;
    if remove_special && vocab.add_bos && tokens.first() == Some(&vocab.specials.bos) {
        remove_space = false;
        tokens = &tokens[1..];
    }
    if remove_special && vocab.add_eos && tokens.last() == Some(&vocab.specials.eos) {
        tokens = &tokens[..tokens.len() - 1];
    }
    let mut avail = text_len_max;
    let mut total: i64 = 0;
    let mut pos = 0usize;
    for &id in tokens {
        let n = token_to_piece(
            vocab,
            id,
            &mut text[pos..pos + avail as usize],
            i32::from(remove_space),
            unparse_special,
        )?;
        remove_space = false;
        if n < 0 {
            avail = 0;
            total -= i64::from(n);
        } else if n > 0 {
            avail -= n;
            pos += n as usize;
            total += i64::from(n);
        }
    }
    let total = i32::try_from(total)
        .map_err(|_| TokenizerError::Invalid("detokenized text longer than INT32_MAX".into()))?;
    if total > text_len_max {
        return Ok(-total);
    }
    let mut total = total as usize;
    if vocab.clean_spaces {
        total = clean_spaces(&mut text[..total]);
    }
    Ok(total as i32)
}

/// Upstream's three clean-up passes over detokenized text (in place; the new length).
fn clean_spaces(text: &mut [u8]) -> usize {
    // " ?", " !", " .", " ,": drop the space.
    let total1 = text.len();
    let mut total = usize::from(total1 > 0);
    for i in 1..total1 {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }
    // " ' ": drop both spaces around a lone apostrophe.
    let total2 = total;
    total = usize::from(total2 > 0);
    let mut i = 1;
    while i < total2 {
        let x = text[i];
        if x == b'\'' && i + 1 < total2 && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }
    // " 's", " 'm", " 're", " 've": drop the space.
    let total3 = total;
    total = usize::from(total3 > 0);
    for i in 1..total3 {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < total3 {
            let x1 = text[i + 1];
            if x1 == b't' || x1 == b'd' {
            } else if x1 == b's' || x1 == b'm' {
                total -= 1;
            } else if i + 2 < total3 {
                let x2 = text[i + 2];
                if (x1 == b'r' || x1 == b'v') && x2 == b'e' {
                    total -= 1;
                }
            }
        }
        text[total] = x;
        total += 1;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_spaces_matches_upstream_passes() {
        let mut t = b"Hello , world ! it 's a ' b".to_vec();
        let n = clean_spaces(&mut t);
        assert_eq!(&t[..n], b"Hello, world! it's a'b");
    }
}
