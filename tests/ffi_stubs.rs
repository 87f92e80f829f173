//! The exports llama-hotswap does not implement yet return their documented failure values
//! without touching their pointer arguments; the batch helpers allocate and free like
//! upstream's llama-batch.cpp.

use std::ffi::c_char;
use std::ptr::{null, null_mut};

use llama::ffi::types::*;
use llama::ffi::{
    adapter, batch, context, memory, model_user, opt, perf, quantize, sampling, state, threadpool,
    tokenize,
};

#[test]
fn context_stubs_return_failure_values() {
    // SAFETY: the stubs never dereference their pointer arguments; NULL is passed throughout.
    unsafe {
        let params = llama::ffi::backend::llama_context_default_params();
        assert!(context::llama_init_from_model(null_mut(), params).is_null());
        assert!(context::llama_new_context_with_model(null_mut(), params).is_null());
        context::llama_free(null_mut());
        assert!(context::llama_get_model(null()).is_null());
        assert_eq!(context::llama_n_ctx(null()), 0);
        assert_eq!(context::llama_n_batch(null()), 0);
        assert_eq!(context::llama_n_seq_max(null()), 0);
        assert!(context::llama_get_memory(null()).is_null());
        assert_eq!(
            context::llama_pooling_type(null()),
            LlamaPoolingType(llama_pooling_type::LLAMA_POOLING_TYPE_UNSPECIFIED as i32)
        );
        assert_eq!(context::llama_n_threads(null_mut()), -1);
        assert_eq!(context::llama_n_threads_batch(null_mut()), -1);
        context::llama_set_n_threads(null_mut(), 4, 4);
        assert!(!context::llama_get_causal_attn(null()));
        assert!(context::llama_get_logits(null_mut()).is_null());
        assert!(context::llama_get_logits_ith(null_mut(), -1).is_null());
        assert!(context::llama_get_embeddings_seq(null_mut(), 0).is_null());
        assert_eq!(
            context::llama_get_sampled_token_ith(null_mut(), 0),
            LLAMA_TOKEN_NULL
        );
        assert_eq!(context::llama_get_sampled_probs_count_ith(null_mut(), 0), 0);
        assert!(!sampling::llama_set_sampler(null_mut(), 0, null_mut()));
        threadpool::llama_attach_threadpool(null_mut(), null_mut(), null_mut());
        threadpool::llama_detach_threadpool(null_mut());
    }
}

#[test]
fn adapter_memory_state_null_contexts_leave_buffers_untouched() {
    let mut buf = [b'x' as c_char; 8];
    let mut count = 77usize;
    let mut tokens = [5 as llama_token; 4];
    // SAFETY: the stubs never dereference their pointer arguments; the non-NULL ones point
    // to live locals, so even a dereference would be sound and is caught by the checks below.
    unsafe {
        assert!(adapter::llama_adapter_lora_init(null_mut(), c"x.gguf".as_ptr()).is_null());
        assert_eq!(
            adapter::llama_adapter_meta_val_str(null(), c"k".as_ptr(), buf.as_mut_ptr(), buf.len()),
            -1
        );
        assert_eq!(adapter::llama_adapter_meta_count(null()), -1);
        assert_eq!(
            adapter::llama_adapter_get_alora_n_invocation_tokens(null()),
            0
        );
        assert!(adapter::llama_adapter_get_alora_invocation_tokens(null()).is_null());
        assert_eq!(
            adapter::llama_set_adapters_lora(null_mut(), null_mut(), 0, null_mut()),
            -1
        );
        assert_eq!(
            adapter::llama_set_adapter_cvec(null_mut(), null(), 0, 0, 0, 0),
            -1
        );

        memory::llama_memory_clear(null_mut(), true);
        assert!(
            memory::llama_memory_seq_rm(null_mut(), 0, 0, -1),
            "NULL memory: true, as upstream"
        );
        assert_eq!(memory::llama_memory_seq_pos_min(null_mut(), 0), -1);
        assert_eq!(memory::llama_memory_seq_pos_max(null_mut(), 0), -1);
        assert!(!memory::llama_memory_can_shift(null_mut()));

        assert_eq!(state::llama_state_get_size(null_mut()), 0);
        assert_eq!(state::llama_state_seq_get_size_ext(null_mut(), 0, 0), 0);
        assert!(!state::llama_state_load_file(
            null_mut(),
            c"s.bin".as_ptr(),
            tokens.as_mut_ptr(),
            tokens.len(),
            &mut count,
        ));
        assert_eq!(
            state::llama_state_seq_load_file(
                null_mut(),
                c"s.bin".as_ptr(),
                0,
                tokens.as_mut_ptr(),
                tokens.len(),
                &mut count,
            ),
            0
        );
        assert!(!state::llama_state_save_file(
            null_mut(),
            c"s.bin".as_ptr(),
            null(),
            0
        ));
    }
    assert!(buf.iter().all(|&c| c == b'x' as c_char));
    assert_eq!(count, 77);
    assert_eq!(tokens, [5; 4]);
}

#[test]
fn decode_tokenize_sampling_stubs_return_failure_values() {
    let mut text = [b'y' as c_char; 16];
    let mut tokens = [9 as llama_token; 4];
    // SAFETY: as above; pointer arguments are NULL or point to live locals.
    unsafe {
        let one = batch::llama_batch_get_one(tokens.as_mut_ptr(), 1);
        assert_eq!(batch::llama_decode(null_mut(), one), -1);
        assert_eq!(batch::llama_encode(null_mut(), one), -1);
        assert!(batch::llama_batch_ext_init(null_mut()).is_null());
        assert_eq!(batch::llama_batch_ext_add_token(null_mut(), 0, 1), -1);
        assert!(!batch::llama_batch_ext_set_pos(null_mut(), 0, null()));
        assert_eq!(
            batch::llama_process(
                null_mut(),
                LlamaProcessType(llama_process_type::LLAMA_PROCESS_TYPE_DECODE as i32),
                null_mut()
            ),
            -1
        );

        let input = c"hello";
        assert_eq!(
            tokenize::llama_tokenize(
                null(),
                input.as_ptr(),
                5,
                tokens.as_mut_ptr(),
                4,
                true,
                false
            ),
            -1
        );
        assert_eq!(
            tokenize::llama_token_to_piece(null(), 1, text.as_mut_ptr(), 16, 0, false),
            -1
        );
        assert_eq!(
            tokenize::llama_detokenize(
                null(),
                tokens.as_ptr(),
                4,
                text.as_mut_ptr(),
                16,
                false,
                false
            ),
            -1
        );

        // Samplers are implemented (tests in ffi-tests/test_sampling.c and the `sampling`
        // part; grammar samplers: tests/grammar.rs and the `grammar` part). NULL arguments
        // give the failure values; no grammar text is a sampler that does nothing (upstream).
        use llama::ffi::sampling::llama_sampler_init_grammar;
        assert!(llama_sampler_init_grammar(null(), c"root ::= \"a\"".as_ptr(), null()).is_null());
        assert!(
            llama_sampler_init_grammar(null(), c"root ::= \"a\"".as_ptr(), c"root".as_ptr())
                .is_null()
        );
        let no_grammar = llama_sampler_init_grammar(null(), null(), null());
        assert!(!no_grammar.is_null());
        sampling::llama_sampler_free(no_grammar);
        assert_eq!(sampling::llama_sampler_chain_n(null()), -1);
        assert!(sampling::llama_sampler_chain_get(null_mut(), -1).is_null());
        assert!(sampling::llama_sampler_name(null()).is_null());
        assert_eq!(sampling::llama_sampler_get_seed(null()), LLAMA_DEFAULT_SEED);
        assert_eq!(
            sampling::llama_sampler_sample(null_mut(), null_mut(), -1),
            LLAMA_TOKEN_NULL
        );
        sampling::llama_sampler_free(null_mut());

        let p = perf::llama_perf_context(null());
        assert_eq!(
            (p.t_start_ms, p.t_load_ms, p.n_eval, p.n_p_eval),
            (0.0, 0.0, 0, 0)
        );
        let s = perf::llama_perf_sampler(null());
        assert_eq!((s.t_sample_ms, s.n_sample), (0.0, 0));

        assert!(opt::llama_opt_param_filter_all(null(), null_mut()));
        assert_eq!(quantize::llama_model_quantize(null(), null(), null()), 1);
        assert!(model_user::llama_model_init_from_user(
            null_mut(),
            None,
            null_mut(),
            llama::ffi::backend::llama_model_default_params()
        )
        .is_null());
    }
    assert!(text.iter().all(|&c| c == b'y' as c_char));
    assert_eq!(tokens, [9; 4]);
}

#[test]
fn batch_get_one_wraps_the_callers_tokens() {
    let mut tokens: [llama_token; 3] = [1, 2, 3];
    // SAFETY: `llama_batch_get_one` only stores the pointer.
    let b = unsafe { batch::llama_batch_get_one(tokens.as_mut_ptr(), 3) };
    assert_eq!(b.n_tokens, 3);
    assert_eq!(b.token, tokens.as_mut_ptr());
    assert!(b.embd.is_null());
    assert!(b.pos.is_null());
    assert!(b.n_seq_id.is_null());
    assert!(b.seq_id.is_null());
    assert!(b.logits.is_null());
}

#[test]
fn batch_init_allocates_token_batches_like_upstream() {
    let (n, n_seq) = (5usize, 3usize);
    let b = batch::llama_batch_init(n as i32, 0, n_seq as i32);
    assert_eq!(b.n_tokens, 0);
    assert!(!b.token.is_null());
    assert!(b.embd.is_null());
    assert!(!b.pos.is_null());
    assert!(!b.n_seq_id.is_null());
    assert!(!b.seq_id.is_null());
    assert!(!b.logits.is_null());
    // SAFETY: the arrays hold `n` entries (`seq_id`: n rows of `n_seq` ids plus a NULL
    // sentinel), as upstream allocates them; every write stays inside them.
    unsafe {
        for i in 0..n {
            *b.token.add(i) = i as llama_token;
            *b.pos.add(i) = i as llama_pos;
            *b.n_seq_id.add(i) = n_seq as i32;
            let row = *b.seq_id.add(i);
            assert!(!row.is_null());
            for s in 0..n_seq {
                *row.add(s) = s as llama_seq_id;
            }
            *b.logits.add(i) = (i == n - 1) as i8;
        }
        assert!((*b.seq_id.add(n)).is_null());
        assert_eq!(*b.token.add(n - 1), (n - 1) as llama_token);
        batch::llama_batch_free(b);
    }
}

#[test]
fn batch_init_allocates_embedding_batches_like_upstream() {
    let (n, n_embd) = (4usize, 8usize);
    let b = batch::llama_batch_init(n as i32, n_embd as i32, 1);
    assert_eq!(b.n_tokens, 0);
    assert!(b.token.is_null());
    assert!(!b.embd.is_null());
    assert!(!b.pos.is_null() && !b.n_seq_id.is_null() && !b.logits.is_null());
    // SAFETY: `embd` holds n * n_embd floats; `seq_id` n rows of one id and a NULL sentinel.
    unsafe {
        for i in 0..n * n_embd {
            *b.embd.add(i) = i as f32;
        }
        for i in 0..n {
            **b.seq_id.add(i) = 0;
        }
        assert!((*b.seq_id.add(n)).is_null());
        batch::llama_batch_free(b);
    }
}

#[test]
fn batch_init_edge_cases() {
    // Zero tokens: upstream still allocates every array (and the one-entry seq_id).
    let b = batch::llama_batch_init(0, 0, 1);
    assert!(!b.token.is_null() && !b.seq_id.is_null());
    // SAFETY: `seq_id` holds exactly its NULL sentinel.
    unsafe {
        assert!((*b.seq_id).is_null());
        batch::llama_batch_free(b);
    }

    // Negative sizes: an all-zero batch (upstream would crash), which frees as a no-op.
    for (n, embd, n_seq) in [(-1, 0, 1), (4, -2, 1), (4, 0, -1)] {
        let b = batch::llama_batch_init(n, embd, n_seq);
        assert_eq!(b.n_tokens, 0);
        assert!(b.token.is_null() && b.embd.is_null() && b.pos.is_null());
        assert!(b.n_seq_id.is_null() && b.seq_id.is_null() && b.logits.is_null());
        // SAFETY: every field is NULL.
        unsafe { batch::llama_batch_free(b) };
    }
}

#[test]
fn stubs_log_once_per_function() {
    use std::sync::{Arc, Mutex};
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink_lines = lines.clone();
    llama::log::set_sink(Some(Box::new(move |_level, text: &str| {
        sink_lines.lock().unwrap().push(text.to_string());
    })));
    for _ in 0..3 {
        // (a stub no other test of this binary calls: the line is logged once per process;
        // training stays out of scope)
        // SAFETY: the stub never dereferences its arguments.
        unsafe {
            opt::llama_opt_epoch(
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
                0,
                None,
                None,
            )
        };
    }
    llama::log::set_sink(None);
    let lines = lines.lock().unwrap();
    let ours: Vec<_> = lines
        .iter()
        .filter(|l| l.contains("llama_opt_epoch"))
        .collect();
    assert_eq!(
        ours,
        ["llama_opt_epoch: not supported by llama-hotswap yet\n"]
    );
}
