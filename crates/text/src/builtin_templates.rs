//! llama.cpp's built-in chat templates by name (`--chat-template chatml`), as Jinja sources
//! that render the prompts its `llama_chat_apply_template` writes (checked against its output
//! in `tests/builtin_templates.rs`), every name llama.cpp's release knows.

/// Every built-in name llama.cpp's release knows.
pub const LLAMA_NAMES: &[&str] = &[
    "chatml",
    "llama2",
    "llama2-sys",
    "llama2-sys-bos",
    "llama2-sys-strip",
    "mistral-v1",
    "mistral-v3",
    "mistral-v3-tekken",
    "mistral-v7",
    "mistral-v7-tekken",
    "phi3",
    "phi4",
    "falcon3",
    "zephyr",
    "monarch",
    "gemma",
    "orion",
    "openchat",
    "vicuna",
    "vicuna-orca",
    "deepseek",
    "deepseek2",
    "deepseek3",
    "deepseek-ocr",
    "command-r",
    "llama3",
    "chatglm3",
    "chatglm4",
    "glmedge",
    "minicpm",
    "exaone3",
    "exaone4",
    "exaone-moe",
    "rwkv-world",
    "granite",
    "granite-4.0",
    "granite-4.1",
    "gigachat",
    "megrez",
    "yandex",
    "bailing",
    "bailing-think",
    "bailing2",
    "llama4",
    "smolvlm",
    "hunyuan-moe",
    "gpt-oss",
    "hunyuan-dense",
    "hunyuan-vl",
    "kimi-k2",
    "seed_oss",
    "grok-2",
    "pangu-embedded",
    "solar-open",
];

/// A built-in template by name: `None` for a name llama.cpp does not know.
pub fn builtin(name: &str) -> Option<String> {
    let each = |body: &str, after: &str| {
        format!("{{%- for m in messages -%}}{body}{{%- endfor -%}}{{%- if add_generation_prompt -%}}{{{{- '{after}' -}}}}{{%- endif -%}}")
    };
    let src = match name {
        "chatml" => each(
            "{{- '<|im_start|>' ~ m['role'] ~ '\\n' ~ m['content'] ~ '<|im_end|>\\n' -}}",
            "<|im_start|>assistant\\n",
        ),
        "llama2" => llama2(false, false, false),
        "llama2-sys" => llama2(true, false, false),
        "llama2-sys-bos" => llama2(true, true, false),
        "llama2-sys-strip" => llama2(true, false, true),
        "mistral-v1" => mistral_v1_v3(" ", " ", false),
        "mistral-v3" => mistral_v1_v3("", " ", true),
        "mistral-v3-tekken" => mistral_v1_v3("", "", false),
        "mistral-v7" => mistral_v7(" "),
        "mistral-v7-tekken" => mistral_v7(""),
        "phi3" => each(
            "{{- '<|' ~ m['role'] ~ '|>\\n' ~ m['content'] ~ '<|end|>\\n' -}}",
            "<|assistant|>\\n",
        ),
        "phi4" => each(
            "{{- '<|im_start|>' ~ m['role'] ~ '<|im_sep|>' ~ m['content'] ~ '<|im_end|>' -}}",
            "<|im_start|>assistant<|im_sep|>",
        ),
        "falcon3" => each(
            "{{- '<|' ~ m['role'] ~ '|>\\n' ~ m['content'] ~ '\\n' -}}",
            "<|assistant|>\\n",
        ),
        "zephyr" => each(
            "{{- '<|' ~ m['role'] ~ '|>\\n' ~ m['content'] ~ '<|endoftext|>\\n' -}}",
            "<|assistant|>\\n",
        ),
        "monarch" => each(
            "{{- ('' if loop.first else '<s>') ~ m['role'] ~ '\\n' ~ m['content'] ~ '</s>\\n' -}}",
            "<s>assistant\\n",
        ),
        "gemma" => GEMMA.to_string(),
        "orion" => ORION.to_string(),
        "openchat" => each(
            "{%- if m['role'] == 'system' -%}{{- m['content'] ~ '<|end_of_turn|>' -}}\
             {%- else -%}{{- 'GPT4 Correct ' ~ m['role'][:1] | upper ~ m['role'][1:] ~ ': ' ~ m['content'] ~ '<|end_of_turn|>' -}}{%- endif -%}",
            "GPT4 Correct Assistant:",
        ),
        "vicuna" | "vicuna-orca" => {
            let system = match name {
                "vicuna" => "m['content'] ~ '\\n\\n'",
                _ => "'SYSTEM: ' ~ m['content'] ~ '\\n'",
            };
            each(
                &format!(
                    "{{%- if m['role'] == 'system' -%}}{{{{- {system} -}}}}\
                     {{%- elif m['role'] == 'user' -%}}{{{{- 'USER: ' ~ m['content'] ~ '\\n' -}}}}\
                     {{%- elif m['role'] == 'assistant' -%}}{{{{- 'ASSISTANT: ' ~ m['content'] ~ '</s>\\n' -}}}}{{%- endif -%}}"
                ),
                "ASSISTANT:",
            )
        }
        "deepseek" => each(
            "{%- if m['role'] == 'system' -%}{{- m['content'] -}}\
             {%- elif m['role'] == 'user' -%}{{- '### Instruction:\\n' ~ m['content'] ~ '\\n' -}}\
             {%- elif m['role'] == 'assistant' -%}{{- '### Response:\\n' ~ m['content'] ~ '\\n<|EOT|>\\n' -}}{%- endif -%}",
            "### Response:\\n",
        ),
        "deepseek2" => each(
            "{%- if m['role'] == 'system' -%}{{- m['content'] ~ '\\n\\n' -}}\
             {%- elif m['role'] == 'user' -%}{{- 'User: ' ~ m['content'] ~ '\\n\\n' -}}\
             {%- elif m['role'] == 'assistant' -%}{{- 'Assistant: ' ~ m['content'] ~ '<｜end▁of▁sentence｜>' -}}{%- endif -%}",
            "Assistant:",
        ),
        "deepseek3" => each(
            "{%- if m['role'] == 'system' -%}{{- m['content'] ~ '\\n\\n' -}}\
             {%- elif m['role'] == 'user' -%}{{- '<｜User｜>' ~ m['content'] -}}\
             {%- elif m['role'] == 'assistant' -%}{{- '<｜Assistant｜>' ~ m['content'] ~ '<｜end▁of▁sentence｜>' -}}{%- endif -%}",
            "<｜Assistant｜>",
        ),
        "command-r" => each(
            "{%- set token = {'system': 'SYSTEM', 'user': 'USER', 'assistant': 'CHATBOT'}.get(m['role']) -%}\
             {%- if token -%}{{- '<|START_OF_TURN_TOKEN|><|' ~ token ~ '_TOKEN|>' ~ (m['content'] | trim) ~ '<|END_OF_TURN_TOKEN|>' -}}{%- endif -%}",
            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
        ),
        "llama3" => each(
            "{{- '<|start_header_id|>' ~ m['role'] ~ '<|end_header_id|>\\n\\n' ~ (m['content'] | trim) ~ '<|eot_id|>' -}}",
            "<|start_header_id|>assistant<|end_header_id|>\\n\\n",
        ),
        "minicpm" => "{%- for m in messages -%}{%- if m['role'] == 'user' -%}\
             {{- '<用户>' ~ (m['content'] | trim) ~ '<AI>' -}}{%- else -%}{{- m['content'] | trim -}}{%- endif -%}{%- endfor -%}"
            .to_string(),
        "granite" => each(
            "{{- '<|start_of_role|>' ~ m['role'] ~ '<|end_of_role|>' ~ ('<|tool_call|>' if m['role'] == 'assistant_tool_call' else '') ~ m['content'] ~ '<|end_of_text|>\\n' -}}",
            "<|start_of_role|>assistant<|end_of_role|>",
        ),
        "granite-4.0" | "granite-4.1" => each(
            "{{- ('<|start_of_role|>assistant<|end_of_role|><|tool_call|>' if m['role'] == 'assistant_tool_call' else '<|start_of_role|>' ~ m['role'] ~ '<|end_of_role|>') ~ m['content'] ~ '<|end_of_text|>\\n' -}}",
            "<|start_of_role|>assistant<|end_of_role|>",
        ),
        "chatglm3" => format!(
            "{{{{- '[gMASK]sop' -}}}}{}",
            each("{{- '<|' ~ m['role'] ~ '|>\\n ' ~ m['content'] -}}", "<|assistant|>")
        ),
        "chatglm4" => format!(
            "{{{{- '[gMASK]<sop>' -}}}}{}",
            each("{{- '<|' ~ m['role'] ~ '|>\\n' ~ m['content'] -}}", "<|assistant|>\\n")
        ),
        "glmedge" => each("{{- '<|' ~ m['role'] ~ '|>\\n' ~ m['content'] -}}", "<|assistant|>"),
        "deepseek-ocr" => "{%- for m in messages -%}{{- m['content'] -}}{%- endfor -%}".to_string(),
        "exaone3" => each(
            "{%- if m['role'] == 'system' -%}{{- '[|system|]' ~ (m['content'] | trim) ~ '[|endofturn|]\\n' -}}\
             {%- elif m['role'] == 'user' -%}{{- '[|user|]' ~ (m['content'] | trim) ~ '\\n' -}}\
             {%- elif m['role'] == 'assistant' -%}{{- '[|assistant|]' ~ (m['content'] | trim) ~ '[|endofturn|]\\n' -}}{%- endif -%}",
            "[|assistant|]",
        ),
        "rwkv-world" => "{%- for m in messages -%}\
             {%- if m['role'] == 'system' -%}{{- 'System: ' ~ (m['content'] | trim) ~ '\\n\\n' -}}\
             {%- elif m['role'] == 'user' -%}{{- 'User: ' ~ (m['content'] | trim) ~ '\\n\\n' -}}{%- if loop.last -%}{{- 'Assistant:' -}}{%- endif -%}\
             {%- elif m['role'] == 'assistant' -%}{{- 'Assistant: ' ~ (m['content'] | trim) ~ '\\n\\n' -}}{%- endif -%}{%- endfor -%}"
            .to_string(),
        "megrez" => each(
            "{{- '<|role_start|>' ~ m['role'] ~ '<|role_end|>' ~ m['content'] ~ '<|turn_end|>' -}}",
            "<|role_start|>assistant<|role_end|>",
        ),
        "llama4" => each(
            "{{- '<|header_start|>' ~ m['role'] ~ '<|header_end|>\\n\\n' ~ (m['content'] | trim) ~ '<|eot|>' -}}",
            "<|header_start|>assistant<|header_end|>\\n\\n",
        ),
        "smolvlm" => format!(
            "{{{{- '<|im_start|>' -}}}}{}",
            each(
                "{%- if m['role'] == 'system' -%}{{- m['content'] ~ '\\n\\n' -}}\
                 {%- elif m['role'] == 'user' -%}{{- 'User: ' ~ m['content'] ~ '<end_of_utterance>\\n' -}}\
                 {%- else -%}{{- 'Assistant: ' ~ m['content'] ~ '<end_of_utterance>\\n' -}}{%- endif -%}",
                "Assistant:",
            )
        ),
        "kimi-k2" => each(
            "{%- set open = {'system': '<|im_system|>system', 'user': '<|im_user|>user', 'assistant': '<|im_assistant|>assistant', 'tool': '<|im_system|>tool'}.get(m['role'], '') -%}\
             {{- (open ~ '<|im_middle|>' if open else '') ~ m['content'] ~ '<|im_end|>' -}}",
            "<|im_assistant|>assistant<|im_middle|>",
        ),
        "seed_oss" => each(
            "{{- '<seed:bos>' ~ m['role'] ~ '\\n' ~ ((m['content'] | trim) if m['role'] == 'assistant' else m['content']) ~ '<seed:eos>' -}}",
            "<seed:bos>assistant\\n",
        ),
        "grok-2" => each(
            "{%- if m['role'] == 'system' -%}{{- 'System: ' ~ (m['content'] | trim) ~ '<|separator|>\\n\\n' -}}\
             {%- elif m['role'] == 'user' -%}{{- 'Human: ' ~ (m['content'] | trim) ~ '<|separator|>\\n\\n' -}}\
             {%- elif m['role'] == 'assistant' -%}{{- 'Assistant: ' ~ m['content'] ~ '<|separator|>\\n\\n' -}}{%- endif -%}",
            "Assistant:",
        ),
        "exaone4" => each(
            "{%- set tag = {'system': '[|system|]', 'user': '[|user|]', 'assistant': '[|assistant|]', 'tool': '[|tool|]'}.get(m['role']) -%}\
             {%- if tag -%}{{- tag ~ (m['content'] | trim) ~ ('\\n' if m['role'] == 'user' else '[|endofturn|]\\n') -}}{%- endif -%}",
            "[|assistant|]",
        ),
        "gigachat" => "{%- set system = messages and messages[0]['role'] == 'system' -%}\
             {{- '<s>' ~ (messages[0]['content'] ~ '<|message_sep|>' if system else '') -}}\
             {%- for m in messages[1 if system else 0:] -%}\
             {%- if m['role'] == 'user' -%}{{- 'user<|role_sep|>' ~ m['content'] ~ '<|message_sep|>available functions<|role_sep|>[]<|message_sep|>' -}}\
             {%- elif m['role'] == 'assistant' -%}{{- 'assistant<|role_sep|>' ~ m['content'] ~ '<|message_sep|>' -}}{%- endif -%}{%- endfor -%}\
             {%- if add_generation_prompt -%}{{- 'assistant<|role_sep|>' -}}{%- endif -%}"
            .to_string(),
        "yandex" => each(
            "{%- if m['role'] == 'user' -%}{{- ' Пользователь: ' ~ m['content'] ~ '\\n\\n' -}}\
             {%- elif m['role'] == 'assistant' -%}{{- ' Ассистент: ' ~ m['content'] ~ '\\n\\n' -}}{%- endif -%}",
            " Ассистент:[SEP]",
        ),
        "hunyuan-moe" => "{%- for m in messages -%}\
             {%- if m['role'] == 'system' -%}{{- '<|startoftext|>' ~ m['content'] ~ '<|extra_4|>' -}}\
             {%- elif m['role'] == 'assistant' -%}{{- m['content'] ~ '<|eos|>' -}}\
             {%- else -%}{{- '<|startoftext|>' ~ m['content'] ~ '<|extra_0|>' -}}{%- endif -%}{%- endfor -%}"
            .to_string(),
        "hunyuan-dense" => "{%- for m in messages -%}\
             {%- if loop.first and m['role'] == 'system' -%}{{- m['content'] ~ '<｜hy_place▁holder▁no▁3｜>' -}}{%- endif -%}\
             {%- if m['role'] == 'assistant' -%}{{- '<｜hy_Assistant｜>' ~ m['content'] ~ '<｜hy_place▁holder▁no▁2｜>' -}}\
             {%- elif m['role'] == 'user' -%}{{- '<｜hy_User｜>' ~ m['content'] ~ '<｜hy_Assistant｜>' -}}{%- endif -%}{%- endfor -%}"
            .to_string(),
        "bailing" | "bailing-think" => each(
            "{{- '<role>' ~ ('HUMAN' if m['role'] == 'user' else m['role'] | upper) ~ '</role>' ~ m['content'] -}}",
            if name == "bailing" { "<role>ASSISTANT</role>" } else { "<role>ASSISTANT</role><think>" },
        ),
        "exaone-moe" => each(
            "{%- if m['role'] in ['system', 'user', 'assistant', 'tool'] -%}\
             {{- '<|' ~ m['role'] ~ '|>\\n' ~ (m['content'] | trim) ~ '<|endofturn|>\\n' -}}{%- endif -%}",
            "<|assistant|>\\n",
        ),
        "bailing2" => format!(
            "{{%- if not (messages and messages[0]['role'] == 'system') -%}}\
             {{{{- '<role>SYSTEM</role>detailed thinking off<|role_end|>' -}}}}{{%- endif -%}}{}",
            each(
                "{{- '<role>' ~ ('HUMAN' if m['role'] == 'user' else m['role'] | upper) ~ '</role>' ~ m['content'] ~ '<|role_end|>' -}}",
                "<role>ASSISTANT</role>",
            )
        ),
        "gpt-oss" => each(
            "{{- '<|start|>' ~ m['role'] ~ '<|message|>' ~ m['content'] ~ ('<|return|>' if m['role'] == 'assistant' else '<|end|>') -}}",
            "<|start|>assistant",
        ),
        "hunyuan-vl" => "{{- '<｜hy_begin▁of▁sentence｜>' -}}{%- for m in messages -%}\
             {%- if loop.first and m['role'] == 'system' -%}{{- m['content'] ~ '<｜hy_place▁holder▁no▁3｜>' -}}\
             {%- elif m['role'] == 'user' -%}{{- m['content'] ~ '<｜hy_User｜>' -}}\
             {%- elif m['role'] == 'assistant' -%}{{- m['content'] ~ '<｜hy_Assistant｜>' -}}{%- endif -%}{%- endfor -%}"
            .to_string(),
        "pangu-embedded" => each(
            "{%- if loop.first and m['role'] != 'system' -%}{{- '[unused9]系统：[unused10]' -}}{%- endif -%}\
             {%- set name = {'system': '系统', 'user': '用户', 'assistant': '助手', 'tool': '工具', 'function': '方法'}.get(m['role']) -%}\
             {%- if name -%}{{- '[unused9]' ~ name ~ '：' ~ m['content'] ~ '[unused10]' -}}{%- endif -%}",
            "[unused9]助手：",
        ),
        "solar-open" => each(
            "{{- '<|begin|>' ~ m['role'] ~ '<|content|>' ~ m['content'] ~ '<|end|>' -}}",
            "<|begin|>assistant",
        ),
        _ => return None,
    };
    Some(src)
}

/// Llama 2's `[INST]` turns: `system` in `<<SYS>>` (or as a line of the first turn),
/// `bos` opening later turns with `<s>`, `strip` trimming every message.
fn llama2(system: bool, bos: bool, strip: bool) -> String {
    let content = if strip {
        "(m['content'] | trim)"
    } else {
        "m['content']"
    };
    let system = if system {
        format!("'<<SYS>>\\n' ~ {content} ~ '\\n<</SYS>>\\n\\n'")
    } else {
        format!("{content} ~ '\\n'")
    };
    let open = if bos { "<s>[INST] " } else { "[INST] " };
    format!(
        "{{%- set ns = namespace(inside=true) -%}}{{{{- '[INST] ' -}}}}{{%- for m in messages -%}}\
         {{%- if not ns.inside -%}}{{%- set ns.inside = true -%}}{{{{- '{open}' -}}}}{{%- endif -%}}\
         {{%- if m['role'] == 'system' -%}}{{{{- {system} -}}}}\
         {{%- elif m['role'] == 'user' -%}}{{{{- {content} ~ ' [/INST]' -}}}}\
         {{%- else -%}}{{{{- {content} ~ '</s>' -}}}}{{%- set ns.inside = false -%}}{{%- endif -%}}{{%- endfor -%}}"
    )
}

/// Mistral's v1 and v3 turns: `lead` before `[INST]` and `[/INST]`, `trail` after `[INST]` and
/// before an answer, `trim_answers` trimming the assistant's messages.
fn mistral_v1_v3(lead: &str, trail: &str, trim_answers: bool) -> String {
    let answer = if trim_answers {
        "(m['content'] | trim)"
    } else {
        "m['content']"
    };
    format!(
        "{{%- set ns = namespace(inside=false) -%}}{{%- for m in messages -%}}\
         {{%- if not ns.inside -%}}{{{{- '{lead}[INST]{trail}' -}}}}{{%- set ns.inside = true -%}}{{%- endif -%}}\
         {{%- if m['role'] == 'system' -%}}{{{{- m['content'] ~ '\\n\\n' -}}}}\
         {{%- elif m['role'] == 'user' -%}}{{{{- m['content'] ~ '{lead}[/INST]' -}}}}\
         {{%- else -%}}{{{{- '{trail}' ~ {answer} ~ '</s>' -}}}}{{%- set ns.inside = false -%}}{{%- endif -%}}{{%- endfor -%}}"
    )
}

/// Mistral's v7 turns, `space` after each opening tag (none for Tekken).
fn mistral_v7(space: &str) -> String {
    format!(
        "{{%- for m in messages -%}}\
         {{%- if m['role'] == 'system' -%}}{{{{- '[SYSTEM_PROMPT]{space}' ~ m['content'] ~ '[/SYSTEM_PROMPT]' -}}}}\
         {{%- elif m['role'] == 'user' -%}}{{{{- '[INST]{space}' ~ m['content'] ~ '[/INST]' -}}}}\
         {{%- else -%}}{{{{- '{space}' ~ m['content'] ~ '</s>' -}}}}{{%- endif -%}}{{%- endfor -%}}"
    )
}

/// Gemma's turns: `assistant` is `model`, contents are trimmed, and system messages (which
/// Gemma lacks) open the next user turn, followed by a blank line.
const GEMMA: &str = r#"{%- set ns = namespace(system='') -%}
{%- for m in messages -%}
  {%- if m['role'] == 'system' -%}
    {%- set ns.system = ns.system ~ (m['content'] | trim) -%}
  {%- else -%}
    {%- set role = 'model' if m['role'] == 'assistant' else m['role'] -%}
    {{- '<start_of_turn>' ~ role ~ '\n' -}}
    {%- if ns.system and role != 'model' -%}
      {{- ns.system ~ '\n\n' -}}
      {%- set ns.system = '' -%}
    {%- endif -%}
    {{- (m['content'] | trim) ~ '<end_of_turn>\n' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}"#;

/// Orion's turns: system messages open the next user turn.
const ORION: &str = r#"{%- set ns = namespace(system='') -%}
{%- for m in messages -%}
  {%- if m['role'] == 'system' -%}
    {%- set ns.system = ns.system ~ m['content'] -%}
  {%- elif m['role'] == 'user' -%}
    {{- 'Human: ' -}}
    {%- if ns.system -%}{{- ns.system ~ '\n\n' -}}{%- set ns.system = '' -%}{%- endif -%}
    {{- m['content'] ~ '\n\nAssistant: </s>' -}}
  {%- else -%}
    {{- m['content'] ~ '</s>' -}}
  {%- endif -%}
{%- endfor -%}"#;
