//! The evaluation text (`-f`): read with a size bound, so `-f /dev/zero` or an endless pipe
//! is refused instead of filling memory. A leaf module: `main` and `sweep` both read texts.

use std::io::Read;
use std::path::Path;

/// Texts larger than this are refused (wikitext-2's test set is 1.3 MB; this bounds what
/// `-f /dev/zero` or an endless pipe can take).
pub const MAX_TEXT_BYTES: u64 = 1 << 30;

/// Reads a text file (or pipe) of at most [`MAX_TEXT_BYTES`].
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path)
        .map_err(|_| format!("error: failed to open file '{}'", path.display()))?;
    let mut text = Vec::new();
    file.take(MAX_TEXT_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("error: failed to read file '{}': {e}", path.display()))?;
    if text.len() as u64 > MAX_TEXT_BYTES {
        return Err(format!(
            "error: '{}' holds more than {MAX_TEXT_BYTES} bytes: not a text to evaluate",
            path.display()
        ));
    }
    Ok(text)
}

/// Reads the text file as upstream's `-f` does (one trailing newline dropped).
pub fn read_text(path: &Path) -> Result<Vec<u8>, String> {
    let mut text = read_bounded(path)?;
    if text.last() == Some(&b'\n') {
        text.pop();
    }
    Ok(text)
}
