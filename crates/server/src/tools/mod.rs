//! OpenAI tool calls: the request's `tools`, the prompt that shows them to the model, the
//! grammar that constrains its calls, and the parser that turns its answer back into
//! `message.tool_calls`. Pure functions of text and JSON; nothing here touches the engine.
//!
//! One chat request with tools flows through it like this:
//!
//! ```text
//! once per model:  format  = ToolFormat::detect(template source) or --tool-format
//!                  support = TemplateSupport::probe(&template)
//! per request:     spec    = ToolSpec::from_request(tools, tool_choice, parallel_tool_calls)?
//!                  tools   = prepare_messages(&mut messages, support, format, &spec)
//!                            ─▶ render the template with `tools`
//!                  grammar = lark(format, &spec, &tokenizer) ─▶ text::GrammarSpec::Lark
//!                  parser  = CallParser::new(format, &spec.tools, seed) when spec.active()
//!                            push(delta) / finish() ─▶ Piece::Text (content)
//!                                                      Piece::Call (tool_calls[i])
//! ```
//!
//! The format is the one the template's source shows (Qwen's `<tool_call>`, Qwen 3.5's
//! `<function=...>` inside it, Llama 3.x's JSON, Mistral's `[TOOL_CALLS]`, DeepSeek-V4's
//! `<｜DSML｜tool_calls>`); a template with no
//! known tool syntax gets [`ToolFormat::Generic`], which the system prompt teaches. A marker
//! that is a control token in the vocabulary (`[TOOL_CALLS]`, `<|python_tag|>`, perhaps
//! `｜DSML｜`) must be rendered into the text the parser reads.

mod dsml;
mod format;
mod grammar;
mod history;
mod parse;
mod prompt;
mod qwen_xml;
mod request;
#[cfg(test)]
mod testing;

pub use format::ToolFormat;
pub use grammar::{lark, marker_tokens};
pub use history::{flatten_tool_turns, normalize_messages};
pub use parse::{parse_whole, CallParser, Piece, ToolCall};
pub use prompt::{add_to_system, fallback_system_prompt, prepare_messages, TemplateSupport};
pub use request::{Tool, ToolChoice, ToolSpec};
