//! Split-file naming (`<prefix>-%05d-of-%05d.gguf`, split numbers 0-based in the API).

/// The file name of split `split_no` (0-based) of `split_count`, as upstream's
/// `llama_split_path` formats it.
pub fn split_path(prefix: &str, split_no: i32, split_count: i32) -> String {
    format!(
        "{prefix}-{:05}-of-{:05}.gguf",
        i64::from(split_no) + 1,
        split_count
    )
}

/// The prefix of `path` if it ends with the postfix of split `split_no` of `split_count`
/// (upstream's `llama_split_prefix`); `None` otherwise.
pub fn split_prefix(path: &str, split_no: i32, split_count: i32) -> Option<&str> {
    let postfix = format!("-{:05}-of-{:05}.gguf", i64::from(split_no) + 1, split_count);
    if path.len() <= postfix.len() {
        return None;
    }
    path.strip_suffix(postfix.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_is_one_based_in_the_file_name() {
        assert_eq!(split_path("/m/x", 2, 4), "/m/x-00003-of-00004.gguf");
    }

    #[test]
    fn prefix_round_trips_and_rejects_mismatch() {
        assert_eq!(split_prefix("/m/x-00003-of-00004.gguf", 2, 4), Some("/m/x"));
        assert_eq!(split_prefix("/m/x-00003-of-00004.gguf", 1, 4), None);
        assert_eq!(split_prefix("-00001-of-00001.gguf", 0, 1), None);
    }
}
