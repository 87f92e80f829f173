//! Built-in chat templates, as upstream's `src/llama-chat.cpp`: a fixed list of named
//! formats, the detection of one of them from a raw Jinja template (exact name, then
//! substring heuristics in upstream's order), and the formatting of a conversation.
//!
//! Not a Jinja engine: a template string only selects one of the hard-coded formats.
//! Everything works on bytes, so content that is not UTF-8 passes through unchanged, exactly
//! as upstream's `std::string` does. Depends on nothing but std.

#![forbid(unsafe_code)]

use std::ffi::CStr;

/// One message of a conversation: role and content as raw bytes (no NUL inside).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    pub role: &'a [u8],
    pub content: &'a [u8],
}

impl<'a> Message<'a> {
    pub fn new(role: &'a str, content: &'a str) -> Self {
        Message {
            role: role.as_bytes(),
            content: content.as_bytes(),
        }
    }
}

/// The built-in formats (upstream's `llm_chat_template`, without UNKNOWN).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Template {
    Chatml,
    Llama2,
    Llama2Sys,
    Llama2SysBos,
    Llama2SysStrip,
    MistralV1,
    MistralV3,
    MistralV3Tekken,
    MistralV7,
    MistralV7Tekken,
    Phi3,
    Phi4,
    Falcon3,
    Zephyr,
    Monarch,
    Gemma,
    Orion,
    Openchat,
    Vicuna,
    VicunaOrca,
    Deepseek,
    Deepseek2,
    Deepseek3,
    DeepseekOcr,
    CommandR,
    Llama3,
    Chatglm3,
    Chatglm4,
    Glmedge,
    Minicpm,
    Exaone3,
    Exaone4,
    ExaoneMoe,
    RwkvWorld,
    Granite3x,
    Granite40,
    Granite41,
    Gigachat,
    Megrez,
    Yandex,
    Bailing,
    BailingThink,
    Bailing2,
    Llama4,
    Smolvlm,
    /// Detected from a template only: upstream lists no name for it.
    Dots1,
    HunyuanMoe,
    OpenaiMoe,
    HunyuanDense,
    HunyuanVl,
    KimiK2,
    SeedOss,
    Grok2,
    PanguEmbed,
    SolarOpen,
}

/// Upstream's name table, in its order: a `std::map`, iterated by bytewise key order, which is
/// the order `llama_chat_builtin_templates` reports. NUL-terminated for the C boundary.
pub static BUILTIN_TEMPLATES: [(&CStr, Template); 54] = [
    (c"bailing", Template::Bailing),
    (c"bailing-think", Template::BailingThink),
    (c"bailing2", Template::Bailing2),
    (c"chatglm3", Template::Chatglm3),
    (c"chatglm4", Template::Chatglm4),
    (c"chatml", Template::Chatml),
    (c"command-r", Template::CommandR),
    (c"deepseek", Template::Deepseek),
    (c"deepseek-ocr", Template::DeepseekOcr),
    (c"deepseek2", Template::Deepseek2),
    (c"deepseek3", Template::Deepseek3),
    (c"exaone-moe", Template::ExaoneMoe),
    (c"exaone3", Template::Exaone3),
    (c"exaone4", Template::Exaone4),
    (c"falcon3", Template::Falcon3),
    (c"gemma", Template::Gemma),
    (c"gigachat", Template::Gigachat),
    (c"glmedge", Template::Glmedge),
    (c"gpt-oss", Template::OpenaiMoe),
    (c"granite", Template::Granite3x),
    (c"granite-4.0", Template::Granite40),
    (c"granite-4.1", Template::Granite41),
    (c"grok-2", Template::Grok2),
    (c"hunyuan-dense", Template::HunyuanDense),
    (c"hunyuan-moe", Template::HunyuanMoe),
    (c"hunyuan-vl", Template::HunyuanVl),
    (c"kimi-k2", Template::KimiK2),
    (c"llama2", Template::Llama2),
    (c"llama2-sys", Template::Llama2Sys),
    (c"llama2-sys-bos", Template::Llama2SysBos),
    (c"llama2-sys-strip", Template::Llama2SysStrip),
    (c"llama3", Template::Llama3),
    (c"llama4", Template::Llama4),
    (c"megrez", Template::Megrez),
    (c"minicpm", Template::Minicpm),
    (c"mistral-v1", Template::MistralV1),
    (c"mistral-v3", Template::MistralV3),
    (c"mistral-v3-tekken", Template::MistralV3Tekken),
    (c"mistral-v7", Template::MistralV7),
    (c"mistral-v7-tekken", Template::MistralV7Tekken),
    (c"monarch", Template::Monarch),
    (c"openchat", Template::Openchat),
    (c"orion", Template::Orion),
    (c"pangu-embedded", Template::PanguEmbed),
    (c"phi3", Template::Phi3),
    (c"phi4", Template::Phi4),
    (c"rwkv-world", Template::RwkvWorld),
    (c"seed_oss", Template::SeedOss),
    (c"smolvlm", Template::Smolvlm),
    (c"solar-open", Template::SolarOpen),
    (c"vicuna", Template::Vicuna),
    (c"vicuna-orca", Template::VicunaOrca),
    (c"yandex", Template::Yandex),
    (c"zephyr", Template::Zephyr),
];

/// The template a built-in name stands for (exact, case-sensitive).
pub fn from_name(name: &[u8]) -> Option<Template> {
    BUILTIN_TEMPLATES
        .binary_search_by(|(n, _)| n.to_bytes().cmp(name))
        .ok()
        .map(|i| BUILTIN_TEMPLATES[i].1)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    let needle = needle.as_bytes();
    needle.len() <= haystack.len() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Upstream's `llm_chat_detect_template`: a built-in name, else the first heuristic (in
/// upstream's order) whose marker substrings the raw template contains; None when nothing
/// matches.
pub fn detect(tmpl: &[u8]) -> Option<Template> {
    use Template as T;
    if let Some(t) = from_name(tmpl) {
        return Some(t);
    }
    let has = |needle: &str| contains(tmpl, needle);
    let t = if has("<|im_start|>") {
        if has("<|im_sep|>") {
            T::Phi4
        } else if has("<end_of_utterance>") {
            // SmolVLM uses <|im_start|> as BOS, but it is not chatml.
            T::Smolvlm
        } else {
            T::Chatml
        }
    } else if tmpl.starts_with(b"mistral") || has("[INST]") {
        if has("[SYSTEM_PROMPT]") {
            T::MistralV7
        } else if has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]") {
            // Mistral's official v1, v3 and v3-tekken templates.
            if has(" [INST]") {
                T::MistralV1
            } else if has("\"[INST]\"") {
                T::MistralV3Tekken
            } else {
                T::MistralV3
            }
        } else if has("content.strip()") {
            T::Llama2SysStrip
        } else if has("bos_token + '[INST]") {
            T::Llama2SysBos
        } else if has("<<SYS>>") {
            T::Llama2Sys
        } else {
            T::Llama2
        }
    } else if has("<|assistant|>") && has("<|end|>") {
        T::Phi3
    } else if has("[gMASK]<sop>") {
        T::Chatglm4
    } else if has("<|assistant|>") && has("<|user|>") {
        if has("<|tool_declare|>") {
            T::ExaoneMoe
        } else if has("</s>") {
            T::Falcon3
        } else {
            T::Glmedge
        }
    } else if has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>") {
        T::Glmedge
    } else if has("<|user|>") && has("<|endoftext|>") {
        T::Zephyr
    } else if has("bos_token + message['role']") {
        T::Monarch
    } else if has("<start_of_turn>") {
        T::Gemma
    } else if has("'\\n\\nAssistant: ' + eos_token") {
        T::Orion
    } else if has("GPT4 Correct ") {
        T::Openchat
    } else if has("USER: ") && has("ASSISTANT: ") {
        if has("SYSTEM: ") {
            T::VicunaOrca
        } else {
            T::Vicuna
        }
    } else if has("### Instruction:") && has("<|EOT|>") {
        T::Deepseek
    } else if has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>") {
        T::CommandR
    } else if has("<|start_header_id|>") && has("<|end_header_id|>") {
        T::Llama3
    } else if has("[gMASK]sop") {
        T::Chatglm3
    } else if has("<用户>") {
        T::Minicpm
    } else if has("'Assistant: ' + message['content'] + eos_token") {
        T::Deepseek2
    } else if has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>") {
        T::Deepseek3
    } else if has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]") {
        if has("[|tool|]") {
            T::Exaone4
        } else {
            T::Exaone3
        }
    } else if has("rwkv-world") || has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}") {
        T::RwkvWorld
    } else if has("<|start_of_role|>") {
        if has("<tool_call>") || has("<tools>") {
            if has("g4_default_system_message") {
                T::Granite40
            } else {
                T::Granite41
            }
        } else {
            T::Granite3x
        }
    } else if has(
        "message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1]",
    ) {
        T::Gigachat
    } else if has("<|role_start|>") {
        T::Megrez
    } else if has(" Ассистент:") {
        T::Yandex
    } else if has("<role>ASSISTANT</role>") && has("'HUMAN'") {
        T::Bailing
    } else if has("<role>ASSISTANT</role>") && has("\"HUMAN\"") && has("<think>") {
        T::BailingThink
    } else if has("<role>ASSISTANT</role>") && has("<role>HUMAN</role>") && has("<|role_end|>") {
        T::Bailing2
    } else if has("<|header_start|>") && has("<|header_end|>") {
        T::Llama4
    } else if has("<|endofuserprompt|>") {
        T::Dots1
    } else if has("<|extra_0|>") && has("<|extra_4|>") {
        T::HunyuanMoe
    } else if has("<|start|>") && has("<|channel|>") {
        T::OpenaiMoe
    } else if has("<｜hy_Assistant｜>") && has("<｜hy_begin▁of▁sentence｜>") {
        T::HunyuanVl
    } else if has("<｜hy_Assistant｜>") && has("<｜hy_place▁holder▁no▁3｜>") {
        T::HunyuanDense
    } else if has("<|im_assistant|>assistant<|im_middle|>") {
        T::KimiK2
    } else if has("<seed:bos>") {
        T::SeedOss
    } else if has("'Assistant: '  + message['content'] + '<|separator|>") {
        T::Grok2
    } else if has("[unused9]系统：[unused10]") {
        T::PanguEmbed
    } else if has("<|begin|>") && has("<|end|>") && has("<|content|>") {
        T::SolarOpen
    } else {
        return None;
    };
    Some(t)
}

/// C's `isspace` in the "C" locale: space, \t, \n, \v, \f, \r (Rust's
/// `is_ascii_whitespace` lacks \v).
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Upstream's `trim`: C whitespace off both ends.
fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| !is_c_space(b)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|&b| !is_c_space(b))
        .map_or(start, |i| i + 1);
    &s[start..end]
}

/// The output buffer: appends strings and byte slices.
struct Out(Vec<u8>);

impl Out {
    fn s(&mut self, text: &str) -> &mut Self {
        self.0.extend_from_slice(text.as_bytes());
        self
    }
    fn b(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.extend_from_slice(bytes);
        self
    }
}

/// Upstream's `llm_chat_apply_template`: the conversation formatted with `tmpl`, ending with
/// the assistant's turn prefix when `add_ass` (templates without one ignore it, as upstream).
pub fn apply(tmpl: Template, chat: &[Message<'_>], add_ass: bool) -> Vec<u8> {
    use Template as T;
    let mut o = Out(Vec::with_capacity(
        chat.iter()
            .map(|m| m.role.len() + m.content.len() + 32)
            .sum::<usize>()
            + 32,
    ));
    match tmpl {
        T::Chatml => {
            for m in chat {
                o.s("<|im_start|>")
                    .b(m.role)
                    .s("\n")
                    .b(m.content)
                    .s("<|im_end|>\n");
            }
            if add_ass {
                o.s("<|im_start|>assistant\n");
            }
        }
        T::MistralV7 | T::MistralV7Tekken => {
            let space = if tmpl == T::MistralV7 { " " } else { "" };
            for m in chat {
                match m.role {
                    b"system" => o
                        .s("[SYSTEM_PROMPT]")
                        .s(space)
                        .b(m.content)
                        .s("[/SYSTEM_PROMPT]"),
                    b"user" => o.s("[INST]").s(space).b(m.content).s("[/INST]"),
                    _ => o.s(space).b(m.content).s("</s>"),
                };
            }
        }
        T::MistralV1 | T::MistralV3 | T::MistralV3Tekken => {
            let leading = if tmpl == T::MistralV1 { " " } else { "" };
            let trailing = if tmpl == T::MistralV3Tekken { "" } else { " " };
            let trim_assistant = tmpl == T::MistralV3;
            let mut inside_turn = false;
            for m in chat {
                if !inside_turn {
                    o.s(leading).s("[INST]").s(trailing);
                    inside_turn = true;
                }
                match m.role {
                    b"system" => o.b(m.content).s("\n\n"),
                    b"user" => o.b(m.content).s(leading).s("[/INST]"),
                    _ => {
                        let content = if trim_assistant {
                            trim(m.content)
                        } else {
                            m.content
                        };
                        inside_turn = false;
                        o.s(trailing).b(content).s("</s>")
                    }
                };
            }
        }
        T::Llama2 | T::Llama2Sys | T::Llama2SysBos | T::Llama2SysStrip => {
            let system_supported = tmpl != T::Llama2;
            let bos_inside_history = tmpl == T::Llama2SysBos;
            let strip = tmpl == T::Llama2SysStrip;
            // The first turn's BOS is the tokenizer's, not the template's.
            let mut inside_turn = true;
            o.s("[INST] ");
            for m in chat {
                let content = if strip { trim(m.content) } else { m.content };
                if !inside_turn {
                    inside_turn = true;
                    o.s(if bos_inside_history {
                        "<s>[INST] "
                    } else {
                        "[INST] "
                    });
                }
                match m.role {
                    b"system" if system_supported => {
                        o.s("<<SYS>>\n").b(content).s("\n<</SYS>>\n\n")
                    }
                    // Without system support the system text still leads the first turn.
                    b"system" => o.b(content).s("\n"),
                    b"user" => o.b(content).s(" [/INST]"),
                    _ => {
                        inside_turn = false;
                        o.b(content).s("</s>")
                    }
                };
            }
        }
        T::Phi3 => {
            for m in chat {
                o.s("<|").b(m.role).s("|>\n").b(m.content).s("<|end|>\n");
            }
            if add_ass {
                o.s("<|assistant|>\n");
            }
        }
        T::Phi4 => {
            for m in chat {
                o.s("<|im_start|>")
                    .b(m.role)
                    .s("<|im_sep|>")
                    .b(m.content)
                    .s("<|im_end|>");
            }
            if add_ass {
                o.s("<|im_start|>assistant<|im_sep|>");
            }
        }
        T::Falcon3 => {
            for m in chat {
                o.s("<|").b(m.role).s("|>\n").b(m.content).s("\n");
            }
            if add_ass {
                o.s("<|assistant|>\n");
            }
        }
        T::Zephyr => {
            for m in chat {
                o.s("<|")
                    .b(m.role)
                    .s("|>\n")
                    .b(m.content)
                    .s("<|endoftext|>\n");
            }
            if add_ass {
                o.s("<|assistant|>\n");
            }
        }
        T::Monarch => {
            for (i, m) in chat.iter().enumerate() {
                // The first message's BOS is the tokenizer's.
                if i > 0 {
                    o.s("<s>");
                }
                o.b(m.role).s("\n").b(m.content).s("</s>\n");
            }
            if add_ass {
                o.s("<s>assistant\n");
            }
        }
        T::Gemma => {
            // No system role: system text is merged into the next non-model turn.
            let mut system = Vec::new();
            for m in chat {
                if m.role == b"system" {
                    system.extend_from_slice(trim(m.content));
                    continue;
                }
                let role: &[u8] = if m.role == b"assistant" {
                    b"model"
                } else {
                    m.role
                };
                o.s("<start_of_turn>").b(role).s("\n");
                if !system.is_empty() && role != b"model" {
                    o.b(&system).s("\n\n");
                    system.clear();
                }
                o.b(trim(m.content)).s("<end_of_turn>\n");
            }
            if add_ass {
                o.s("<start_of_turn>model\n");
            }
        }
        T::Orion => {
            let mut system = Vec::new();
            for m in chat {
                match m.role {
                    b"system" => system.extend_from_slice(m.content),
                    b"user" => {
                        o.s("Human: ");
                        if !system.is_empty() {
                            o.b(&system).s("\n\n");
                            system.clear();
                        }
                        o.b(m.content).s("\n\nAssistant: </s>");
                    }
                    _ => {
                        o.b(m.content).s("</s>");
                    }
                }
            }
        }
        T::Openchat => {
            for m in chat {
                if m.role == b"system" {
                    o.b(m.content).s("<|end_of_turn|>");
                } else {
                    let mut role = m.role.to_vec();
                    if let Some(first) = role.first_mut() {
                        first.make_ascii_uppercase();
                    }
                    o.s("GPT4 Correct ")
                        .b(&role)
                        .s(": ")
                        .b(m.content)
                        .s("<|end_of_turn|>");
                }
            }
            if add_ass {
                o.s("GPT4 Correct Assistant:");
            }
        }
        T::Vicuna | T::VicunaOrca => {
            for m in chat {
                match m.role {
                    b"system" if tmpl == T::VicunaOrca => o.s("SYSTEM: ").b(m.content).s("\n"),
                    b"system" => o.b(m.content).s("\n\n"),
                    b"user" => o.s("USER: ").b(m.content).s("\n"),
                    b"assistant" => o.s("ASSISTANT: ").b(m.content).s("</s>\n"),
                    _ => &mut o,
                };
            }
            if add_ass {
                o.s("ASSISTANT:");
            }
        }
        T::Deepseek => {
            for m in chat {
                match m.role {
                    b"system" => o.b(m.content),
                    b"user" => o.s("### Instruction:\n").b(m.content).s("\n"),
                    b"assistant" => o.s("### Response:\n").b(m.content).s("\n<|EOT|>\n"),
                    _ => &mut o,
                };
            }
            if add_ass {
                o.s("### Response:\n");
            }
        }
        T::CommandR => {
            for m in chat {
                let prefix = match m.role {
                    b"system" => "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>",
                    b"user" => "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
                    b"assistant" => "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
                    _ => continue,
                };
                o.s(prefix).b(trim(m.content)).s("<|END_OF_TURN_TOKEN|>");
            }
            if add_ass {
                o.s("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
            }
        }
        T::Llama3 => {
            for m in chat {
                o.s("<|start_header_id|>")
                    .b(m.role)
                    .s("<|end_header_id|>\n\n");
                o.b(trim(m.content)).s("<|eot_id|>");
            }
            if add_ass {
                o.s("<|start_header_id|>assistant<|end_header_id|>\n\n");
            }
        }
        T::Chatglm3 => {
            o.s("[gMASK]sop");
            for m in chat {
                o.s("<|").b(m.role).s("|>\n ").b(m.content);
            }
            if add_ass {
                o.s("<|assistant|>");
            }
        }
        T::Chatglm4 => {
            o.s("[gMASK]<sop>");
            for m in chat {
                o.s("<|").b(m.role).s("|>\n").b(m.content);
            }
            if add_ass {
                o.s("<|assistant|>\n");
            }
        }
        T::Glmedge => {
            for m in chat {
                o.s("<|").b(m.role).s("|>\n").b(m.content);
            }
            if add_ass {
                o.s("<|assistant|>");
            }
        }
        T::Minicpm => {
            for m in chat {
                if m.role == b"user" {
                    o.s("<用户>").b(trim(m.content)).s("<AI>");
                } else {
                    o.b(trim(m.content));
                }
            }
        }
        T::Deepseek2 => {
            for m in chat {
                match m.role {
                    b"system" => o.b(m.content).s("\n\n"),
                    b"user" => o.s("User: ").b(m.content).s("\n\n"),
                    b"assistant" => o.s("Assistant: ").b(m.content).s("<｜end▁of▁sentence｜>"),
                    _ => &mut o,
                };
            }
            if add_ass {
                o.s("Assistant:");
            }
        }
        T::Deepseek3 => {
            for m in chat {
                match m.role {
                    b"system" => o.b(m.content).s("\n\n"),
                    b"user" => o.s("<｜User｜>").b(m.content),
                    b"assistant" => o
                        .s("<｜Assistant｜>")
                        .b(m.content)
                        .s("<｜end▁of▁sentence｜>"),
                    _ => &mut o,
                };
            }
            if add_ass {
                o.s("<｜Assistant｜>");
            }
        }
        T::DeepseekOcr => {
            // No template: the contents, concatenated.
            for m in chat {
                o.b(m.content);
            }
        }
        T::Exaone3 | T::Exaone4 => {
            for m in chat {
                match m.role {
                    b"system" => o.s("[|system|]").b(trim(m.content)).s("[|endofturn|]\n"),
                    b"user" => o.s("[|user|]").b(trim(m.content)).s("\n"),
                    b"assistant" => o.s("[|assistant|]").b(trim(m.content)).s("[|endofturn|]\n"),
                    b"tool" if tmpl == T::Exaone4 => {
                        o.s("[|tool|]").b(trim(m.content)).s("[|endofturn|]\n")
                    }
                    _ => &mut o,
                };
            }
            if add_ass {
                o.s("[|assistant|]");
            }
        }
        T::ExaoneMoe => {
            for m in chat {
                let prefix = match m.role {
                    b"system" => "<|system|>\n",
                    b"user" => "<|user|>\n",
                    b"assistant" => "<|assistant|>\n",
                    b"tool" => "<|tool|>\n",
                    _ => continue,
                };
                o.s(prefix).b(trim(m.content)).s("<|endofturn|>\n");
            }
            if add_ass {
                o.s("<|assistant|>\n");
            }
        }
        T::RwkvWorld => {
            // The model's EOT token is "\n\n"; the prompt for the answer follows the last
            // user message whatever add_ass says.
            for (i, m) in chat.iter().enumerate() {
                match m.role {
                    b"system" => {
                        o.s("System: ").b(trim(m.content)).s("\n\n");
                    }
                    b"user" => {
                        o.s("User: ").b(trim(m.content)).s("\n\n");
                        if i == chat.len() - 1 {
                            o.s("Assistant:");
                        }
                    }
                    b"assistant" => {
                        o.s("Assistant: ").b(trim(m.content)).s("\n\n");
                    }
                    _ => {}
                }
            }
        }
        T::Granite3x => {
            for m in chat {
                o.s("<|start_of_role|>").b(m.role).s("<|end_of_role|>");
                if m.role == b"assistant_tool_call" {
                    o.s("<|tool_call|>");
                }
                o.b(m.content).s("<|end_of_text|>\n");
            }
            if add_ass {
                o.s("<|start_of_role|>assistant<|end_of_role|>");
            }
        }
        T::Granite40 | T::Granite41 => {
            for m in chat {
                if m.role == b"assistant_tool_call" {
                    o.s("<|start_of_role|>assistant<|end_of_role|><|tool_call|>");
                } else {
                    o.s("<|start_of_role|>").b(m.role).s("<|end_of_role|>");
                }
                o.b(m.content).s("<|end_of_text|>\n");
            }
            if add_ass {
                o.s("<|start_of_role|>assistant<|end_of_role|>");
            }
        }
        T::Gigachat => {
            let has_system = chat.first().is_some_and(|m| m.role == b"system");
            if has_system {
                o.s("<s>").b(chat[0].content).s("<|message_sep|>");
            } else {
                o.s("<s>");
            }
            for m in &chat[usize::from(has_system)..] {
                match m.role {
                    b"user" => o
                        .s("user<|role_sep|>")
                        .b(m.content)
                        .s("<|message_sep|>available functions<|role_sep|>[]<|message_sep|>"),
                    b"assistant" => o
                        .s("assistant<|role_sep|>")
                        .b(m.content)
                        .s("<|message_sep|>"),
                    _ => &mut o,
                };
            }
            if add_ass {
                o.s("assistant<|role_sep|>");
            }
        }
        T::Megrez => {
            for m in chat {
                o.s("<|role_start|>")
                    .b(m.role)
                    .s("<|role_end|>")
                    .b(m.content)
                    .s("<|turn_end|>");
            }
            if add_ass {
                o.s("<|role_start|>assistant<|role_end|>");
            }
        }
        T::Yandex => {
            // "\n\n" is the model's EOT token.
            for m in chat {
                match m.role {
                    b"user" => o.s(" Пользователь: ").b(m.content).s("\n\n"),
                    b"assistant" => o.s(" Ассистент: ").b(m.content).s("\n\n"),
                    _ => &mut o,
                };
            }
            if add_ass {
                o.s(" Ассистент:[SEP]");
            }
        }
        T::Bailing | T::BailingThink | T::Bailing2 => {
            if tmpl == T::Bailing2 && !chat.first().is_some_and(|m| m.role == b"system") {
                o.s("<role>SYSTEM</role>detailed thinking off<|role_end|>");
            }
            for m in chat {
                let role = if m.role == b"user" {
                    b"HUMAN".to_vec()
                } else {
                    m.role.to_ascii_uppercase()
                };
                o.s("<role>").b(&role).s("</role>").b(m.content);
                if tmpl == T::Bailing2 {
                    o.s("<|role_end|>");
                }
            }
            if add_ass {
                o.s("<role>ASSISTANT</role>");
                if tmpl == T::BailingThink {
                    o.s("<think>");
                }
            }
        }
        T::Llama4 => {
            for m in chat {
                o.s("<|header_start|>").b(m.role).s("<|header_end|>\n\n");
                o.b(trim(m.content)).s("<|eot|>");
            }
            if add_ass {
                o.s("<|header_start|>assistant<|header_end|>\n\n");
            }
        }
        T::Smolvlm => {
            // <|im_start|> is the model's BOS here; the rest is not chatml.
            o.s("<|im_start|>");
            for m in chat {
                match m.role {
                    b"system" => o.b(m.content).s("\n\n"),
                    b"user" => o.s("User: ").b(m.content).s("<end_of_utterance>\n"),
                    _ => o.s("Assistant: ").b(m.content).s("<end_of_utterance>\n"),
                };
            }
            if add_ass {
                o.s("Assistant:");
            }
        }
        T::Dots1 => {
            for m in chat {
                match m.role {
                    b"system" => o.s("<|system|>").b(m.content).s("<|endofsystem|>"),
                    b"user" => o.s("<|userprompt|>").b(m.content).s("<|endofuserprompt|>"),
                    _ => o.s("<|response|>").b(m.content).s("<|endofresponse|>"),
                };
            }
            if add_ass {
                o.s("<|response|>");
            }
        }
        T::HunyuanMoe => {
            for m in chat {
                match m.role {
                    b"system" => o.s("<|startoftext|>").b(m.content).s("<|extra_4|>"),
                    b"assistant" => o.b(m.content).s("<|eos|>"),
                    _ => o.s("<|startoftext|>").b(m.content).s("<|extra_0|>"),
                };
            }
        }
        T::OpenaiMoe => {
            for m in chat {
                o.s("<|start|>").b(m.role).s("<|message|>").b(m.content);
                o.s(if m.role == b"assistant" {
                    "<|return|>"
                } else {
                    "<|end|>"
                });
            }
            if add_ass {
                o.s("<|start|>assistant");
            }
        }
        T::HunyuanDense => {
            for (i, m) in chat.iter().enumerate() {
                if i == 0 && m.role == b"system" {
                    o.b(m.content).s("<｜hy_place▁holder▁no▁3｜>");
                }
                match m.role {
                    b"assistant" => o
                        .s("<｜hy_Assistant｜>")
                        .b(m.content)
                        .s("<｜hy_place▁holder▁no▁2｜>"),
                    b"user" => o.s("<｜hy_User｜>").b(m.content).s("<｜hy_Assistant｜>"),
                    _ => &mut o,
                };
            }
        }
        T::HunyuanVl => {
            o.s("<｜hy_begin▁of▁sentence｜>");
            for (i, m) in chat.iter().enumerate() {
                if i == 0 && m.role == b"system" {
                    o.b(m.content).s("<｜hy_place▁holder▁no▁3｜>");
                    continue;
                }
                match m.role {
                    b"user" => o.b(m.content).s("<｜hy_User｜>"),
                    b"assistant" => o.b(m.content).s("<｜hy_Assistant｜>"),
                    _ => &mut o,
                };
            }
        }
        T::KimiK2 => {
            for m in chat {
                match m.role {
                    b"system" => o.s("<|im_system|>system<|im_middle|>"),
                    b"user" => o.s("<|im_user|>user<|im_middle|>"),
                    b"assistant" => o.s("<|im_assistant|>assistant<|im_middle|>"),
                    b"tool" => o.s("<|im_system|>tool<|im_middle|>"),
                    _ => &mut o,
                };
                o.b(m.content).s("<|im_end|>");
            }
            if add_ass {
                o.s("<|im_assistant|>assistant<|im_middle|>");
            }
        }
        T::SeedOss => {
            for m in chat {
                let content = if m.role == b"assistant" {
                    trim(m.content)
                } else {
                    m.content
                };
                o.s("<seed:bos>")
                    .b(m.role)
                    .s("\n")
                    .b(content)
                    .s("<seed:eos>");
            }
            if add_ass {
                o.s("<seed:bos>assistant\n");
            }
        }
        T::Grok2 => {
            for m in chat {
                match m.role {
                    b"system" => o.s("System: ").b(trim(m.content)).s("<|separator|>\n\n"),
                    b"user" => o.s("Human: ").b(trim(m.content)).s("<|separator|>\n\n"),
                    b"assistant" => o.s("Assistant: ").b(m.content).s("<|separator|>\n\n"),
                    _ => &mut o,
                };
            }
            if add_ass {
                o.s("Assistant:");
            }
        }
        T::PanguEmbed => {
            for (i, m) in chat.iter().enumerate() {
                if i == 0 && m.role != b"system" {
                    o.s("[unused9]系统：[unused10]");
                }
                let prefix = match m.role {
                    b"system" => "[unused9]系统：",
                    b"user" => "[unused9]用户：",
                    b"assistant" => "[unused9]助手：",
                    b"tool" => "[unused9]工具：",
                    b"function" => "[unused9]方法：",
                    _ => continue,
                };
                o.s(prefix).b(m.content).s("[unused10]");
            }
            if add_ass {
                o.s("[unused9]助手：");
            }
        }
        T::SolarOpen => {
            for m in chat {
                o.s("<|begin|>")
                    .b(m.role)
                    .s("<|content|>")
                    .b(m.content)
                    .s("<|end|>");
            }
            if add_ass {
                o.s("<|begin|>assistant");
            }
        }
    }
    o.0
}

/// `llama_chat_apply_template`'s core: the template named or recognised in `tmpl` applied to
/// `chat`; None when no built-in template matches.
pub fn apply_detected(tmpl: &[u8], chat: &[Message<'_>], add_ass: bool) -> Option<Vec<u8>> {
    detect(tmpl).map(|t| apply(t, chat, add_ass))
}

#[cfg(test)]
mod tests;
