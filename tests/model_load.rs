//! Model loading through the C entry points (via the rlib): every load mode gives the file's
//! bytes, progress and cancel follow upstream, options behave as documented, splits are found.

use std::ffi::{c_void, CStr, CString};
use std::path::{Path, PathBuf};

use llama::ffi::backend::llama_model_default_params;
use llama::ffi::handles::llama_model;
use llama::ffi::model::*;
use llama::ffi::types::*;
use llama::ffi::vocab::*;
use llama::gguf::{GgmlType, Gguf, GgufWriter, SplitMode};

/// A tiny llama-family model: F32 weights with a deterministic pattern.
fn tiny_model(n_layer: u32) -> GgufWriter {
    let (n_embd, n_ff, n_vocab) = (32i64, 64i64, 8i64);
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.set("general.name", "tiny");
    w.set("llama.context_length", 256u32);
    w.set("llama.embedding_length", n_embd as u32);
    w.set("llama.block_count", n_layer);
    w.set("llama.feed_forward_length", n_ff as u32);
    w.set("llama.attention.head_count", 4u32);
    w.set("llama.attention.head_count_kv", 2u32);
    w.set("llama.attention.layer_norm_rms_epsilon", 1e-5f32);
    w.set("llama.rope.freq_base", 10000.0f32);
    w.set("tokenizer.ggml.model", "llama");
    let tokens: Vec<String> = [
        "<unk>",
        "<s>",
        "</s>",
        "<0x0A>",
        "a",
        "b",
        "c",
        "<|eot_id|>",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    w.set("tokenizer.ggml.tokens", tokens);
    w.set(
        "tokenizer.ggml.scores",
        vec![0.0f32, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, 0.0],
    );
    w.set("tokenizer.ggml.token_type", vec![2i32, 3, 3, 6, 1, 1, 1, 4]);
    w.set("tokenizer.chat_template", "{{ messages }}");
    w.set("tokenizer.chat_template.tool_use", "{{ tools }}");
    let f32_ty = GgmlType::from_id(0).unwrap();
    let mut seed = 1u32;
    let mut tensor = |w: &mut GgufWriter, name: &str, dims: &[i64]| {
        let n: i64 = dims.iter().product();
        let data: Vec<u8> = (0..n)
            .flat_map(|_| {
                seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
                ((seed >> 8) as f32 / 16777216.0 - 0.5).to_le_bytes()
            })
            .collect();
        w.add_tensor(name, dims, f32_ty, data).unwrap();
    };
    tensor(&mut w, "token_embd.weight", &[n_embd, n_vocab]);
    for l in 0..n_layer {
        tensor(&mut w, &format!("blk.{l}.attn_norm.weight"), &[n_embd]);
        tensor(&mut w, &format!("blk.{l}.attn_q.weight"), &[n_embd, n_embd]);
        tensor(&mut w, &format!("blk.{l}.ffn_up.weight"), &[n_embd, n_ff]);
    }
    tensor(&mut w, "output_norm.weight", &[n_embd]);
    tensor(&mut w, "output.weight", &[n_embd, n_vocab]);
    w
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("llama-hotswap-test-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(w: &GgufWriter, path: &Path) {
    w.write_to(path).unwrap();
}

fn load(path: &Path, params: llama_model_params) -> *mut llama_model {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    unsafe { llama_model_load_from_file(c.as_ptr(), params) }
}

fn with_mode(mode: i32) -> llama_model_params {
    let mut p = llama_model_default_params();
    p.load_mode = LlamaLoadMode(mode);
    p
}

/// Reads one tensor through `llama_ext_tensor_read`; None when it holds no data.
fn read_tensor(model: *mut llama_model, name: &str) -> Option<Vec<u8>> {
    let c = CString::new(name).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let n = unsafe {
        llama::ffi::ext::llama_ext_tensor_read(
            model,
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 0).then(|| {
        buf.truncate(n as usize);
        buf
    })
}

/// The model's bytes for every tensor of the reference file, in its order.
fn tensor_bytes_like(model: *mut llama_model, reference: &Path) -> Vec<(String, Vec<u8>)> {
    file_bytes(reference)
        .into_iter()
        .map(|(name, _)| {
            let b = read_tensor(model, &name).expect(&name);
            (name, b)
        })
        .collect()
}

/// Every tensor's bytes as the file holds them.
fn file_bytes(path: &Path) -> Vec<(String, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    g.tensors()
        .iter()
        .map(|t| (t.name.to_string(), g.tensor_data(t).unwrap().to_vec()))
        .collect()
}

#[test]
fn every_load_mode_gives_the_file_bytes() {
    let dir = temp_dir("modes");
    let path = dir.join("tiny.gguf");
    write(&tiny_model(3), &path);
    let expected = file_bytes(&path);
    for mode in [-1, 0, 1, 2, 3, 4] {
        let model = load(&path, with_mode(mode));
        assert!(!model.is_null(), "load mode {mode}");
        assert_eq!(
            tensor_bytes_like(model, &path),
            expected,
            "load mode {mode}"
        );
        unsafe { llama_model_free(model) };
    }
}

#[test]
fn getters_report_the_file() {
    let dir = temp_dir("getters");
    let path = dir.join("tiny.gguf");
    write(&tiny_model(2), &path);
    let model = load(&path, with_mode(0));
    assert!(!model.is_null());
    unsafe {
        assert_eq!(llama_model_n_ctx_train(model), 256);
        assert_eq!(llama_model_n_embd(model), 32);
        assert_eq!(llama_model_n_layer(model), 2);
        assert_eq!(llama_model_n_head(model), 4);
        assert_eq!(llama_model_n_head_kv(model), 2);
        assert_eq!(llama_model_rope_type(model).0, 0);
        assert_eq!(llama_model_rope_freq_scale_train(model), 1.0);
        let mut buf = [0 as std::ffi::c_char; 128];
        let n = llama_model_desc(model, buf.as_mut_ptr(), buf.len());
        let desc = CStr::from_ptr(buf.as_ptr()).to_str().unwrap();
        assert_eq!(desc, "llama ?B (guessed) all F32");
        assert_eq!(n as usize, desc.len());
        // snprintf convention: truncated write, full length returned.
        let n = llama_model_desc(model, buf.as_mut_ptr(), 4);
        assert_eq!(n as usize, desc.len());
        assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "lla");
        assert_eq!(llama_model_ftype(model).0, 1024);
        let key = CString::new("llama.rope.freq_base").unwrap();
        let n = llama_model_meta_val_str(model, key.as_ptr(), buf.as_mut_ptr(), buf.len());
        assert_eq!(
            CStr::from_ptr(buf.as_ptr()).to_str().unwrap(),
            "10000.000000"
        );
        assert_eq!(n, 12);
        let missing = CString::new("nope").unwrap();
        assert_eq!(
            llama_model_meta_val_str(model, missing.as_ptr(), buf.as_mut_ptr(), buf.len()),
            -1
        );
        assert_eq!(buf[0], 0);
        // Arrays are not listed: 10 scalar keys + 2 templates.
        assert_eq!(llama_model_meta_count(model), 13);
        assert_eq!(
            llama_model_meta_key_by_index(model, 13, buf.as_mut_ptr(), buf.len()),
            -1
        );
        let tmpl = llama_model_chat_template(model, std::ptr::null());
        assert_eq!(CStr::from_ptr(tmpl).to_str().unwrap(), "{{ messages }}");
        let name = CString::new("tool_use").unwrap();
        assert_eq!(
            CStr::from_ptr(llama_model_chat_template(model, name.as_ptr()))
                .to_str()
                .unwrap(),
            "{{ tools }}"
        );
        let expected_params: u64 = 32 * 8 * 2 + 2 * (32 + 32 * 32 + 32 * 64) + 32;
        assert_eq!(llama_model_n_params(model), expected_params);
        assert_eq!(llama_model_size(model), expected_params * 4);

        let vocab = llama_model_get_vocab(model);
        assert_eq!(llama_vocab_type(vocab).0, 1);
        assert_eq!(llama_vocab_n_tokens(vocab), 8);
        assert_eq!(llama_vocab_bos(vocab), 1);
        assert_eq!(llama_vocab_eos(vocab), 2);
        assert_eq!(llama_vocab_nl(vocab), 3);
        assert_eq!(llama_vocab_eot(vocab), 7);
        assert!(
            llama_vocab_is_eog(vocab, 2)
                && llama_vocab_is_eog(vocab, 7)
                && !llama_vocab_is_eog(vocab, 4)
        );
        assert!(llama_vocab_is_control(vocab, 1));
        assert_eq!(
            CStr::from_ptr(llama_vocab_get_text(vocab, 5))
                .to_str()
                .unwrap(),
            "b"
        );
        assert_eq!(llama_vocab_get_score(vocab, 6), -3.0);
        assert!(llama_vocab_get_text(vocab, 99).is_null());
        assert!(llama_vocab_get_add_bos(vocab) && !llama_vocab_get_add_eos(vocab));
        llama_model_free(model);
    }
}

#[test]
fn progress_starts_at_zero_ends_at_one_and_cancel_returns_null() {
    let dir = temp_dir("progress");
    let path = dir.join("tiny.gguf");
    write(&tiny_model(2), &path);
    unsafe extern "C" fn record(p: f32, ud: *mut c_void) -> bool {
        let seen = unsafe { &mut *(ud as *mut Vec<f32>) };
        seen.push(p);
        true
    }
    for mode in [0, 1] {
        let mut seen: Vec<f32> = Vec::new();
        let mut params = with_mode(mode);
        params.progress_callback = Some(record);
        params.progress_callback_user_data = &mut seen as *mut Vec<f32> as *mut c_void;
        let model = load(&path, params);
        assert!(!model.is_null());
        unsafe { llama_model_free(model) };
        assert_eq!(seen.first(), Some(&0.0));
        assert_eq!(seen.last(), Some(&1.0));
        assert_eq!(
            seen.len(),
            1 + 2 * 3 + 2 + 1,
            "one call per tensor plus the final 1.0"
        );
        assert!(seen.windows(2).all(|w| w[0] <= w[1]));
    }
    unsafe extern "C" fn cancel_half(p: f32, _: *mut c_void) -> bool {
        p <= 0.5
    }
    let mut params = with_mode(0);
    params.progress_callback = Some(cancel_half);
    assert!(load(&path, params).is_null());
    // Cancelling at exactly 1.0 still cancels, as upstream.
    unsafe extern "C" fn cancel_at_end(p: f32, _: *mut c_void) -> bool {
        p < 1.0
    }
    params.progress_callback = Some(cancel_at_end);
    assert!(load(&path, params).is_null());
}

#[test]
fn vocab_only_and_no_alloc_skip_data_and_progress() {
    let dir = temp_dir("options");
    let path = dir.join("tiny.gguf");
    write(&tiny_model(2), &path);
    unsafe extern "C" fn never(_: f32, _: *mut c_void) -> bool {
        panic!("progress must not be called");
    }
    let mut params = with_mode(1);
    params.vocab_only = true;
    params.progress_callback = Some(never);
    let model = load(&path, params);
    assert!(!model.is_null());
    unsafe {
        assert_eq!(llama_model_n_layer(model), 0);
        assert_eq!(llama_model_n_head(model), 0);
        let mut buf = [1 as std::ffi::c_char; 8];
        assert_eq!(llama_model_desc(model, buf.as_mut_ptr(), buf.len()), 0);
        assert_eq!(llama_vocab_n_tokens(llama_model_get_vocab(model)), 8);
        assert!(llama_model_size(model) > 0);
        llama_model_free(model);
    }
    for mode in [-1, 0, 1, 4] {
        let mut params = with_mode(mode);
        params.no_alloc = true;
        params.progress_callback = Some(never);
        let model = load(&path, params);
        assert!(!model.is_null(), "no_alloc in mode {mode}");
        for (name, _) in file_bytes(&path) {
            assert!(
                read_tensor(model, &name).is_none(),
                "{name} must hold no data"
            );
        }
        unsafe { llama_model_free(model) };
    }
}

#[test]
fn kv_overrides_change_reads_not_listing() {
    let dir = temp_dir("overrides");
    let path = dir.join("tiny.gguf");
    write(&tiny_model(2), &path);
    let mut list: Vec<llama_model_kv_override> = Vec::new();
    let mk = |key: &str, tag: i32, value: llama_model_kv_override_value| {
        let mut k = [0 as std::ffi::c_char; 128];
        for (i, b) in key.bytes().enumerate() {
            k[i] = b as std::ffi::c_char;
        }
        llama_model_kv_override {
            tag: LlamaKvOverrideType(tag),
            key: k,
            value,
        }
    };
    list.push(mk(
        "llama.context_length",
        0,
        llama_model_kv_override_value { val_i64: 4096 },
    ));
    list.push(mk(
        "llama.context_length",
        0,
        llama_model_kv_override_value { val_i64: 8 },
    ));
    list.push(mk(
        "llama.embedding_length",
        1,
        llama_model_kv_override_value { val_f64: 1.0 },
    ));
    list.push(mk("", 0, llama_model_kv_override_value { val_i64: 0 }));
    let mut params = with_mode(0);
    params.kv_overrides = list.as_ptr();
    let model = load(&path, params);
    assert!(!model.is_null());
    unsafe {
        assert_eq!(llama_model_n_ctx_train(model), 4096, "first duplicate wins");
        assert_eq!(
            llama_model_n_embd(model),
            32,
            "mismatched tag uses the file value"
        );
        let key = CString::new("llama.context_length").unwrap();
        let mut buf = [0 as std::ffi::c_char; 32];
        llama_model_meta_val_str(model, key.as_ptr(), buf.as_mut_ptr(), buf.len());
        assert_eq!(CStr::from_ptr(buf.as_ptr()).to_str().unwrap(), "256");
        llama_model_free(model);
    }
}

#[test]
fn check_tensors_rejects_nan_and_bad_files_fail_cleanly() {
    let dir = temp_dir("check");
    let path = dir.join("nan.gguf");
    let mut w = tiny_model(1);
    let f32_ty = GgmlType::from_id(0).unwrap();
    w.add_tensor(
        "blk.0.extra.weight",
        &[4],
        f32_ty,
        [1.0f32, f32::NAN, 0.0, 0.0]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect(),
    )
    .unwrap();
    write(&w, &path);
    let mut params = with_mode(1);
    params.check_tensors = true;
    assert!(load(&path, params).is_null());
    params.check_tensors = false;
    let model = load(&path, params);
    assert!(!model.is_null());
    unsafe { llama_model_free(model) };

    // Truncated file, missing file, invalid enum: NULL, no crash.
    let bytes = std::fs::read(&path).unwrap();
    let cut = dir.join("cut.gguf");
    // The last tensor is 16 bytes followed by 16 bytes of padding: cut into its data.
    std::fs::write(&cut, &bytes[..bytes.len() - 24]).unwrap();
    for mode in [0, 1] {
        assert!(load(&cut, with_mode(mode)).is_null());
    }
    assert!(load(&dir.join("absent.gguf"), with_mode(0)).is_null());
    assert!(load(&path, with_mode(42)).is_null());
    unsafe {
        assert!(llama_model_load_from_file(std::ptr::null(), with_mode(0)).is_null());
        llama_model_free(std::ptr::null_mut());
    }
}

#[test]
fn split_sets_are_discovered_and_checked() {
    let dir = temp_dir("splits");
    let prefix = dir.join("model");
    let shards = tiny_model(3)
        .write_split(prefix.to_str().unwrap(), SplitMode::MaxTensors(4))
        .unwrap();
    assert!(shards.len() > 1);
    let whole = dir.join("whole.gguf");
    write(&tiny_model(3), &whole);
    let model = load(&shards[0], with_mode(1));
    assert!(!model.is_null());
    assert_eq!(tensor_bytes_like(model, &whole), file_bytes(&whole));
    unsafe { llama_model_free(model) };

    // Explicit paths, any names.
    let renamed: Vec<PathBuf> = shards
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let q = dir.join(format!("part{i}.bin"));
            std::fs::copy(p, &q).unwrap();
            q
        })
        .collect();
    let cpaths: Vec<CString> = renamed
        .iter()
        .map(|p| CString::new(p.to_str().unwrap()).unwrap())
        .collect();
    let mut ptrs: Vec<*const std::ffi::c_char> = cpaths.iter().map(|c| c.as_ptr()).collect();
    let model =
        unsafe { llama_model_load_from_splits(ptrs.as_mut_ptr(), ptrs.len(), with_mode(0)) };
    assert!(!model.is_null());
    assert_eq!(tensor_bytes_like(model, &whole), file_bytes(&whole));
    unsafe { llama_model_free(model) };

    // A later shard first, a wrong order, a missing shard: NULL.
    assert!(load(&shards[1], with_mode(0)).is_null());
    if ptrs.len() > 2 {
        ptrs.swap(1, 2);
        assert!(unsafe {
            llama_model_load_from_splits(ptrs.as_mut_ptr(), ptrs.len(), with_mode(0))
        }
        .is_null());
    }
    std::fs::remove_file(shards.last().unwrap()).unwrap();
    assert!(load(&shards[0], with_mode(0)).is_null());
}

#[test]
fn load_from_file_ptr_reads_from_the_current_position() {
    let dir = temp_dir("fileptr");
    let path = dir.join("tiny.gguf");
    write(&tiny_model(2), &path);
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    unsafe {
        let f = libc::fopen(cpath.as_ptr(), c"rb".as_ptr());
        assert!(!f.is_null());
        let model = llama_model_load_from_file_ptr(f, with_mode(0));
        libc::fclose(f);
        assert!(!model.is_null());
        assert_eq!(tensor_bytes_like(model, &path), file_bytes(&path));
        llama_model_free(model);
        assert!(llama_model_load_from_file_ptr(std::ptr::null_mut(), with_mode(0)).is_null());
    }
}
