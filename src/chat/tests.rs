//! Expected outputs are facts from upstream's tests/test-chat-template.cpp (its six-message
//! conversation, add_ass on); the detection cases are marker strings of upstream's heuristics.

use super::*;

fn conversation() -> Vec<Message<'static>> {
    vec![
        Message::new("system", "You are a helpful assistant"),
        Message::new("user", "Hello"),
        Message::new("assistant", "Hi there"),
        Message::new("user", "Who are you"),
        Message::new("assistant", "   I am an assistant   "),
        Message::new("user", "Another question"),
    ]
}

fn render(name: &str, chat: &[Message<'_>], add_ass: bool) -> String {
    let tmpl = from_name(name.as_bytes()).unwrap_or_else(|| panic!("{name} is not built in"));
    String::from_utf8(apply(tmpl, chat, add_ass)).expect("UTF-8 output")
}

#[track_caller]
fn check(name: &str, expected: &str) {
    assert_eq!(
        render(name, &conversation(), true),
        expected,
        "template {name}"
    );
}

#[test]
fn builtin_list_is_upstreams_map_order() {
    assert_eq!(BUILTIN_TEMPLATES.len(), 54);
    for pair in BUILTIN_TEMPLATES.windows(2) {
        assert!(pair[0].0 < pair[1].0, "{:?} !< {:?}", pair[0].0, pair[1].0);
    }
    for (name, t) in &BUILTIN_TEMPLATES {
        assert_eq!(from_name(name.to_bytes()), Some(*t));
        assert_eq!(
            detect(name.to_bytes()),
            Some(*t),
            "exact name wins: {name:?}"
        );
    }
    assert_eq!(from_name(b"dots1"), None, "upstream has no name for dots1");
    assert_eq!(from_name(b"chatml "), None);
    assert_eq!(from_name(b"ChatML"), None);
}

#[test]
fn chatml_family() {
    let conv = "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\n\
        Hello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are \
        you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>\
        user\nAnother question<|im_end|>\n";
    check("chatml", &format!("{conv}<|im_start|>assistant\n"));
    assert_eq!(render("chatml", &conversation(), false), conv);
    check(
        "phi4",
        "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user\
         <|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>\
         user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>   I am an assistant   \
         <|im_end|><|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant\
         <|im_sep|>",
    );
}

#[test]
fn llama2_family() {
    check(
        "llama2",
        "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   \
         I am an assistant   </s>[INST] Another question [/INST]",
    );
    check(
        "llama2-sys-bos",
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>\
         [INST] Who are you [/INST]   I am an assistant   </s><s>[INST] Another question [/INST]",
    );
    check(
        "llama2-sys-strip",
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] \
         Who are you [/INST]I am an assistant</s>[INST] Another question [/INST]",
    );
    check(
        "monarch",
        "system\nYou are a helpful assistant</s>\n<s>user\nHello</s>\n<s>assistant\nHi there</s>\n\
         <s>user\nWho are you</s>\n<s>assistant\n   I am an assistant   </s>\n<s>user\nAnother \
         question</s>\n<s>assistant\n",
    );
}

#[test]
fn mistral_family() {
    check(
        "mistral-v1",
        " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you \
         [/INST]    I am an assistant   </s> [INST] Another question [/INST]",
    );
    check(
        "mistral-v3",
        "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] \
         I am an assistant</s>[INST] Another question[/INST]",
    );
    check(
        "mistral-v3-tekken",
        "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   \
         I am an assistant   </s>[INST]Another question[/INST]",
    );
    check(
        "mistral-v7",
        "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there\
         </s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]",
    );
}

#[test]
fn merged_system_prompts() {
    check(
        "gemma",
        "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>\
         model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n\
         <start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother \
         question<end_of_turn>\n<start_of_turn>model\n",
    );
    check(
        "orion",
        "Human: You are a helpful assistant\n\nHello\n\nAssistant: </s>Hi there</s>Human: Who are \
         you\n\nAssistant: </s>   I am an assistant   </s>Human: Another question\n\nAssistant: </s>",
    );
}

#[test]
fn role_prefix_families() {
    check(
        "openchat",
        "You are a helpful assistant<|end_of_turn|>GPT4 Correct User: Hello<|end_of_turn|>GPT4 \
         Correct Assistant: Hi there<|end_of_turn|>GPT4 Correct User: Who are you<|end_of_turn|>\
         GPT4 Correct Assistant:    I am an assistant   <|end_of_turn|>GPT4 Correct User: Another \
         question<|end_of_turn|>GPT4 Correct Assistant:",
    );
    check(
        "vicuna",
        "You are a helpful assistant\n\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are you\n\
         ASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:",
    );
    check(
        "vicuna-orca",
        "SYSTEM: You are a helpful assistant\nUSER: Hello\nASSISTANT: Hi there</s>\nUSER: Who are \
         you\nASSISTANT:    I am an assistant   </s>\nUSER: Another question\nASSISTANT:",
    );
    check(
        "deepseek",
        "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n### \
         Instruction:\nWho are you\n### Response:\n   I am an assistant   \n<|EOT|>\n### \
         Instruction:\nAnother question\n### Response:\n",
    );
    check(
        "deepseek2",
        "You are a helpful assistant\n\nUser: Hello\n\nAssistant: Hi there<｜end▁of▁sentence｜>\
         User: Who are you\n\nAssistant:    I am an assistant   <｜end▁of▁sentence｜>User: \
         Another question\n\nAssistant:",
    );
    check(
        "yandex",
        " Пользователь: Hello\n\n Ассистент: Hi there\n\n Пользователь: Who are you\n\n \
         Ассистент:    I am an assistant   \n\n Пользователь: Another question\n\n Ассистент:[SEP]",
    );
    check(
        "bailing",
        "<role>SYSTEM</role>You are a helpful assistant<role>HUMAN</role>Hello<role>ASSISTANT\
         </role>Hi there<role>HUMAN</role>Who are you<role>ASSISTANT</role>   I am an assistant   \
         <role>HUMAN</role>Another question<role>ASSISTANT</role>",
    );
    check(
        "gigachat",
        "<s>You are a helpful assistant<|message_sep|>user<|role_sep|>Hello<|message_sep|>available \
         functions<|role_sep|>[]<|message_sep|>assistant<|role_sep|>Hi there<|message_sep|>user\
         <|role_sep|>Who are you<|message_sep|>available functions<|role_sep|>[]<|message_sep|>\
         assistant<|role_sep|>   I am an assistant   <|message_sep|>user<|role_sep|>Another \
         question<|message_sep|>available functions<|role_sep|>[]<|message_sep|>assistant\
         <|role_sep|>",
    );
}

#[test]
fn header_families() {
    check(
        "command-r",
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|>\
         <|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>\
         <|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who \
         are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an assistant\
         <|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another question\
         <|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    );
    check(
        "llama3",
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant\
         <|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho \
         are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant\
         <|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    check(
        "phi3",
        "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi \
         there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\
         \n<|user|>\nAnother question<|end|>\n<|assistant|>\n",
    );
    check(
        "megrez",
        "<|role_start|>system<|role_end|>You are a helpful assistant<|turn_end|><|role_start|>user\
         <|role_end|>Hello<|turn_end|><|role_start|>assistant<|role_end|>Hi there<|turn_end|>\
         <|role_start|>user<|role_end|>Who are you<|turn_end|><|role_start|>assistant<|role_end|>   \
         I am an assistant   <|turn_end|><|role_start|>user<|role_end|>Another question\
         <|turn_end|><|role_start|>assistant<|role_end|>",
    );
    check(
        "seed_oss",
        "<seed:bos>system\nYou are a helpful assistant<seed:eos><seed:bos>user\nHello<seed:eos>\
         <seed:bos>assistant\nHi there<seed:eos><seed:bos>user\nWho are you<seed:eos><seed:bos>\
         assistant\nI am an assistant<seed:eos><seed:bos>user\nAnother question<seed:eos>\
         <seed:bos>assistant\n",
    );
}

#[test]
fn glm_family_and_minicpm() {
    check(
        "chatglm3",
        "[gMASK]sop<|system|>\n You are a helpful assistant<|user|>\n Hello<|assistant|>\n Hi there\
         <|user|>\n Who are you<|assistant|>\n    I am an assistant   <|user|>\n Another question\
         <|assistant|>",
    );
    check(
        "chatglm4",
        "[gMASK]<sop><|system|>\nYou are a helpful assistant<|user|>\nHello<|assistant|>\nHi there\
         <|user|>\nWho are you<|assistant|>\n   I am an assistant   <|user|>\nAnother question\
         <|assistant|>\n",
    );
    check(
        "glmedge",
        "<|system|>\nYou are a helpful assistant<|user|>\nHello<|assistant|>\nHi there<|user|>\n\
         Who are you<|assistant|>\n   I am an assistant   <|user|>\nAnother question<|assistant|>",
    );
    check(
        "minicpm",
        "You are a helpful assistant<用户>Hello<AI>Hi there<用户>Who are you<AI>I am an assistant\
         <用户>Another question<AI>",
    );
}

#[test]
fn granite_tool_calls() {
    let base = "<|start_of_role|>system<|end_of_role|>You are a helpful assistant<|end_of_text|>\n\
        <|start_of_role|>user<|end_of_role|>Hello<|end_of_text|>\n<|start_of_role|>assistant\
        <|end_of_role|>Hi there<|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Who are you\
        <|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>   I am an assistant   \
        <|end_of_text|>\n<|start_of_role|>user<|end_of_role|>Another question<|end_of_text|>\n\
        <|start_of_role|>user<|end_of_role|>What is the weather?<|end_of_text|>\n";
    let tail =
        "<|start_of_role|>tool_response<|end_of_role|>{\"temperature\": 72}<|end_of_text|>\n\
        <|start_of_role|>assistant<|end_of_role|>";
    let call3 = "[{\"name\": \"get_weather\", \"arguments\": {\"location\": \"NYC\"}}]";
    let call4 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"NYC\"}}\
        \n</tool_call>";
    let with_call = |call: &'static str| {
        let mut chat = conversation();
        chat.push(Message::new("user", "What is the weather?"));
        chat.push(Message::new("assistant_tool_call", call));
        chat.push(Message::new("tool_response", "{\"temperature\": 72}"));
        chat
    };
    assert_eq!(
        render("granite", &with_call(call3), true),
        format!(
            "{base}<|start_of_role|>assistant_tool_call<|end_of_role|><|tool_call|>{call3}\
             <|end_of_text|>\n{tail}"
        )
    );
    for name in ["granite-4.0", "granite-4.1"] {
        assert_eq!(
            render(name, &with_call(call4), true),
            format!(
                "{base}<|start_of_role|>assistant<|end_of_role|><|tool_call|>{call4}\
                 <|end_of_text|>\n{tail}"
            ),
            "{name}"
        );
    }
}

#[test]
fn add_ass_and_empty_conversations() {
    // Templates without an assistant prefix ignore add_ass; an empty chat keeps fixed prefixes.
    for name in [
        "llama2",
        "mistral-v7",
        "orion",
        "minicpm",
        "hunyuan-moe",
        "rwkv-world",
    ] {
        assert_eq!(
            render(name, &conversation(), true),
            render(name, &conversation(), false),
            "{name}"
        );
    }
    assert_eq!(render("chatml", &[], false), "");
    assert_eq!(render("chatml", &[], true), "<|im_start|>assistant\n");
    assert_eq!(render("llama2", &[], true), "[INST] ");
    assert_eq!(render("chatglm3", &[], false), "[gMASK]sop");
    assert_eq!(
        render("bailing2", &[], true),
        "<role>SYSTEM</role>detailed thinking off<|role_end|><role>ASSISTANT</role>"
    );
    assert_eq!(render("gigachat", &[], false), "<s>");
    assert_eq!(
        render("hunyuan-vl", &[], false),
        "<｜hy_begin▁of▁sentence｜>"
    );
    assert_eq!(render("smolvlm", &[], true), "<|im_start|>Assistant:");
}

#[test]
fn trim_is_c_isspace() {
    // \v and \f are C whitespace; NBSP (U+00A0) is not.
    let chat = [Message::new("user", "\u{b}\u{c}\t\r\n x \u{a0}\n")];
    assert_eq!(
        render("llama3", &chat, false),
        "<|start_header_id|>user<|end_header_id|>\n\nx \u{a0}<|eot_id|>"
    );
    let blank = [Message::new("system", " \t\n")];
    assert_eq!(
        render("command-r", &blank, false),
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|><|END_OF_TURN_TOKEN|>"
    );
}

#[test]
fn role_case_mapping_is_ascii_only() {
    let chat = [
        Message::new("tool", "t"),
        Message::new("ärole", "x"),
        Message::new("", "e"),
    ];
    assert_eq!(
        render("bailing", &chat, false),
        "<role>TOOL</role>t<role>äROLE</role>x<role></role>e"
    );
    assert_eq!(
        render("openchat", &chat, false),
        "GPT4 Correct Tool: t<|end_of_turn|>GPT4 Correct ärole: x<|end_of_turn|>GPT4 Correct : \
         e<|end_of_turn|>"
    );
}

#[test]
fn bytes_pass_through() {
    let content: &[u8] = b"\xff\xfe\x80 ok";
    let chat = [Message {
        role: b"user",
        content,
    }];
    let out = apply(Template::Chatml, &chat, false);
    assert_eq!(out, b"<|im_start|>user\n\xff\xfe\x80 ok<|im_end|>\n");
}

#[test]
fn detection_follows_upstreams_order() {
    use Template as T;
    let cases: &[(&str, Option<Template>)] = &[
        ("{{'<|im_start|>' + message['role']}}", Some(T::Chatml)),
        ("<|im_start|><|im_sep|>", Some(T::Phi4)),
        ("<|im_start|>User:<end_of_utterance>", Some(T::Smolvlm)),
        ("mistral-v9", Some(T::Llama2)),
        ("xmistral", None),
        ("[INST] <<SYS>>", Some(T::Llama2Sys)),
        ("bos_token + '[INST] ' <<SYS>>", Some(T::Llama2SysBos)),
        (
            "[INST] content.strip() bos_token + '[INST]",
            Some(T::Llama2SysStrip),
        ),
        (
            "[INST] [SYSTEM_PROMPT] [AVAILABLE_TOOLS]",
            Some(T::MistralV7),
        ),
        ("{{ ' [INST] ' + system_message }}", Some(T::MistralV1)),
        (
            "{{ \"[INST]\" }}[AVAILABLE_TOOLS]",
            Some(T::MistralV3Tekken),
        ),
        ("{{'[INST]'}}[AVAILABLE_TOOLS]", Some(T::MistralV3)),
        ("<|assistant|><|end|>", Some(T::Phi3)),
        ("<|assistant|><|user|></s>", Some(T::Falcon3)),
        ("<|assistant|><|user|>", Some(T::Glmedge)),
        (
            "<|assistant|><|user|><|tool_declare|></s>",
            Some(T::ExaoneMoe),
        ),
        ("<|user|><|endoftext|>", Some(T::Zephyr)),
        ("USER: ASSISTANT: SYSTEM: ", Some(T::VicunaOrca)),
        (
            "[|system|][|assistant|][|endofturn|][|tool|]",
            Some(T::Exaone4),
        ),
        (
            "<|start_of_role|><tools>g4_default_system_message",
            Some(T::Granite40),
        ),
        ("<|start_of_role|><tool_call>", Some(T::Granite41)),
        ("<|start_of_role|>", Some(T::Granite3x)),
        (
            "<role>ASSISTANT</role>\"HUMAN\"<think>",
            Some(T::BailingThink),
        ),
        ("<|endofuserprompt|>", Some(T::Dots1)),
        (
            "<｜hy_Assistant｜><｜hy_begin▁of▁sentence｜>",
            Some(T::HunyuanVl),
        ),
        ("[unused9]系统：[unused10]", Some(T::PanguEmbed)),
        ("<|begin|><|end|><|content|>", Some(T::SolarOpen)),
        ("", None),
        ("INVALID TEMPLATE", None),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", None),
    ];
    for (tmpl, expected) in cases {
        assert_eq!(detect(tmpl.as_bytes()), *expected, "{tmpl:?}");
    }
    assert_eq!(
        apply_detected(b"INVALID TEMPLATE", &conversation(), true),
        None
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        // Markers and roles appear often enough to reach every branch; any byte but NUL.
        prop_oneof![
            proptest::collection::vec(1u8..=255, 0..24),
            proptest::sample::select(vec![
                "system",
                "user",
                "assistant",
                "tool",
                "<|im_start|>",
                "[INST]",
                "mistral",
                "<|assistant|>",
                "<|user|>",
                "<|end|>",
                "<start_of_turn>",
                " \t\u{b}",
            ])
            .prop_map(|s| s.as_bytes().to_vec()),
        ]
    }

    proptest! {
        /// Any template and conversation: detection and formatting never panic; the exact
        /// name of a built-in template always wins; chatml keeps every byte of every message.
        #[test]
        fn any_input_is_formatted(
            tmpl in proptest::collection::vec(bytes(), 0..4),
            raw in proptest::collection::vec((bytes(), bytes()), 0..6),
            add_ass: bool,
        ) {
            let tmpl = tmpl.concat();
            let chat: Vec<Message<'_>> =
                raw.iter().map(|(r, c)| Message { role: r, content: c }).collect();
            if let Some(t) = detect(&tmpl) {
                let out = apply(t, &chat, add_ass);
                prop_assert_eq!(apply_detected(&tmpl, &chat, add_ass), Some(out));
            }
            for (name, t) in &BUILTIN_TEMPLATES {
                let _ = apply(*t, &chat, add_ass);
                prop_assert_eq!(detect(name.to_bytes()), Some(*t));
            }
            let mut want = Vec::new();
            for m in &chat {
                want.extend_from_slice(b"<|im_start|>");
                want.extend_from_slice(m.role);
                want.push(b'\n');
                want.extend_from_slice(m.content);
                want.extend_from_slice(b"<|im_end|>\n");
            }
            if add_ass {
                want.extend_from_slice(b"<|im_start|>assistant\n");
            }
            prop_assert_eq!(apply(Template::Chatml, &chat, add_ass), want);
        }
    }
}
