//! The tools and resources the official MCP conformance suite calls by name (`greet`,
//! `slow_compute`, `confirm_delete`, `test_simple_text`, `test://static-text`, …), built only with
//! the cargo feature `conformance` and never part of the shipped server. The long ones run like
//! the real long tools: through `task_api::call_long` (the same inline-or-task decision), the
//! same task runner and executor, and the same durable task rows; `confirm_delete` and
//! `multi_input` wait for the client through the runner's `input_required`. The rest answer at
//! once, some with a SEP-2322 `InputRequiredResult` round trip whose `requestState` is sealed
//! with an HMAC so a changed one is refused.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities,
    CompleteRequestParams, CompleteResult, CompletionInfo, ContentBlock, InputRequest,
    InputRequests, InputRequiredResult, JsonObject, ReadResourceResult, Reference,
    ResourceContents, Tool,
};
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::engine::control::{Control, WorkProgress};
use crate::error::{Error, Result};
use crate::mcp::task_api;
use crate::tasks::Tasks;

/// A 1×1 transparent PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
/// A WAV file of one silent 8-bit sample at 8 kHz.
const WAV: &str = "UklGRiUAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQEAAACA";

/// Fixture tools that run through the task runner (and so may become tasks).
const LONG: [&str; 7] = [
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
    "test_tool_with_progress",
];

/// Whether `tool` is a fixture that runs through the task runner.
pub(crate) fn is_long(tool: &str) -> bool {
    LONG.contains(&tool)
}

/// Whether `tool` is a fixture whose work cannot be answered inline (it needs tasks: -32021
/// for a client that did not declare them).
pub(crate) fn requires_task(tool: &str) -> bool {
    matches!(
        tool,
        "failing_job" | "confirm_delete" | "multi_input" | "test_tool_with_task"
    )
}

/// The cost estimate of a long fixture, in milliseconds, for the inline-or-task decision.
pub(crate) fn estimate(tool: &str, args: &Value) -> f64 {
    match tool {
        "slow_compute" => args.get("seconds").and_then(Value::as_f64).unwrap_or(1.0) * 1e3,
        "failing_job" | "protocol_error_job" => 1_000.0,
        "test_tool_with_progress" => 450.0,
        // Waits for a person.
        _ => 60_000.0,
    }
}

/// Sleeps `ms`, a little at a time, stopping early when the work is cancelled.
fn pause(ctl: &dyn Control, ms: u64) -> Result<()> {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        if ctl.is_cancelled() {
            return Err(Error::Cancelled);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// How long a fixture waits for the client's answers (the suite answers at once).
const ANSWER_WAIT: Duration = Duration::from_secs(600);

/// `completion/complete` of the suite's prompt argument (`test_prompt_with_arguments`); `None`
/// for every other reference, which the server completes itself.
pub(crate) fn complete(request: &CompleteRequestParams) -> Option<CompleteResult> {
    let Reference::Prompt(p) = &request.r#ref else {
        return None;
    };
    if p.name != "test_prompt_with_arguments" {
        return None;
    }
    let values: Vec<String> = ["paris", "park", "party"]
        .into_iter()
        .filter(|v| v.starts_with(&request.argument.value))
        .map(str::to_owned)
        .collect();
    Some(CompleteResult::new(
        CompletionInfo::with_all_values(values).ok()?,
    ))
}

/// An `elicitation/create` request for a form of `properties` (all required).
fn elicit(message: &str, properties: Value) -> Value {
    let required: Vec<String> = properties
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    json!({"method": "elicitation/create", "params": {
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": properties, "required": required},
    }})
}

/// A `sampling/createMessage` request asking `question`.
fn sample(question: &str) -> Value {
    json!({"method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": question}}],
        "maxTokens": 100,
    }})
}

/// A `roots/list` request.
fn roots() -> Value {
    json!({"method": "roots/list", "params": {}})
}

/// Runs a long fixture inside the task runner (the executor's share).
pub(crate) fn run(tool: &str, args: &Value, ctl: &dyn Control) -> Result<Value> {
    match tool {
        "slow_compute" => {
            let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(1.0);
            let total = (seconds * 10.0).round().max(0.0) as u64;
            for step in 0..total {
                ctl.report(&WorkProgress {
                    done: step,
                    total,
                    ..WorkProgress::default()
                });
                pause(ctl, 100)?;
            }
            let label = args.get("label").and_then(Value::as_str).unwrap_or("");
            Ok(json!({"label": label, "seconds": seconds, "answer": 42}))
        }
        "failing_job" => {
            pause(ctl, 1_000)?;
            Err(Error::invalid(
                "failing_job",
                "it always fails",
                "this fixture reports a tool error on purpose",
            ))
        }
        "protocol_error_job" => {
            pause(ctl, 300)?;
            panic!("protocol_error_job fails with a panic on purpose");
        }
        "confirm_delete" => {
            let file = args.get("filename").and_then(Value::as_str).unwrap_or("");
            let schema = json!({"confirm": {"type": "boolean", "description": "Delete it?"}});
            let asked = Map::from_iter([(
                "confirm".to_owned(),
                elicit(&format!("Delete {file}?"), schema),
            )]);
            let answers = ctl.ask(&asked, ANSWER_WAIT)?;
            let confirmed = answers
                .get("confirm")
                .is_some_and(|a| a["action"] == "accept" && a["content"]["confirm"] == true);
            Ok(json!({"filename": file, "deleted": confirmed}))
        }
        "multi_input" => {
            let asked = Map::from_iter([
                (
                    "name".to_owned(),
                    elicit("Your name?", json!({"name": {"type": "string"}})),
                ),
                (
                    "confirm".to_owned(),
                    elicit("Go ahead?", json!({"confirm": {"type": "boolean"}})),
                ),
            ]);
            let answers = ctl.ask(&asked, ANSWER_WAIT)?;
            Ok(json!({"answers": answers}))
        }
        "test_tool_with_task" => {
            pause(ctl, 300)?;
            let name = args.get("_user_name").and_then(Value::as_str).unwrap_or("");
            Ok(json!({"greeting": format!("Hello, {name}!")}))
        }
        "test_tool_with_progress" => {
            for done in [1, 50, 100] {
                ctl.report(&WorkProgress {
                    done,
                    total: 100,
                    ..WorkProgress::default()
                });
                pause(ctl, 150)?;
            }
            Ok(json!({"progress": "done"}))
        }
        other => Err(Error::invalid(
            "tool",
            format!("`{other}` is not a long fixture"),
            "call it directly",
        )),
    }
}

fn schema(v: Value) -> Arc<JsonObject> {
    Arc::new(match v {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    })
}

fn no_arguments() -> Value {
    json!({"type": "object", "properties": {}})
}

/// The fixture tools, listed after the real ones.
pub(crate) fn tools() -> Vec<Tool> {
    let plain = |name: &'static str, description: &'static str| {
        Tool::new(name, description, schema(no_arguments()))
    };
    let mut tools = vec![
        Tool::new(
            "greet",
            "Says hello to `name` (conformance fixture).",
            schema(
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ),
        ),
        Tool::new(
            "slow_compute",
            "Computes for `seconds`, as a task when the client supports them (conformance fixture).",
            schema(
                json!({"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}}),
            ),
        ),
        Tool::new(
            "confirm_delete",
            "Asks the client to confirm before it deletes `filename` (conformance fixture).",
            schema(json!({"type": "object", "properties": {"filename": {"type": "string"}}})),
        ),
        plain(
            "failing_job",
            "Fails with a tool error after a second (conformance fixture).",
        ),
        plain(
            "protocol_error_job",
            "Fails with an internal error (conformance fixture).",
        ),
        plain(
            "multi_input",
            "Asks the client two things at once (conformance fixture).",
        ),
        plain(
            "test_tool_with_task",
            "Asks for a name, then greets it in a task (conformance fixture).",
        ),
        plain(
            "test_tool_with_progress",
            "Reports progress three times (conformance fixture).",
        ),
        plain("test_simple_text", "Returns text (conformance fixture)."),
        plain(
            "test_image_content",
            "Returns an image (conformance fixture).",
        ),
        plain("test_audio_content", "Returns audio (conformance fixture)."),
        plain(
            "test_embedded_resource",
            "Returns an embedded resource (conformance fixture).",
        ),
        plain(
            "test_multiple_content_types",
            "Returns text, an image and a resource (conformance fixture).",
        ),
        plain(
            "test_error_handling",
            "Returns a tool error (conformance fixture).",
        ),
        plain(
            "test_missing_capability",
            "Needs the client's sampling capability (conformance fixture).",
        ),
        plain(
            "test_streaming_elicitation",
            "Asks the client through an input-required result (conformance fixture).",
        ),
        plain(
            "test_logging_tool",
            "Runs without logging to the client (conformance fixture).",
        ),
    ];
    for name in MRTR {
        tools.push(plain(
            name,
            "Asks the client for input in a round trip (conformance fixture).",
        ));
    }
    tools.push(Tool::new(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features",
        schema(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"},
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false,
        })),
    ));
    tools
}

/// The SEP-2322 round-trip fixtures (ephemeral input requests, no task).
const MRTR: [&str; 8] = [
    "test_input_required_result_capabilities",
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state",
];

fn text(s: impl Into<String>) -> Result<CallToolResponse, McpError> {
    Ok(CallToolResponse::Complete(CallToolResult::success(vec![
        ContentBlock::text(s),
    ])))
}

/// Answers a fixture that does not run through the task runner; `None` for any other tool.
pub(crate) async fn call(
    tasks: &Arc<Tasks>,
    owner: crate::tasks::Requester,
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
) -> Option<Result<CallToolResponse, McpError>> {
    let caps = ctx.client_capabilities();
    let args = request.arguments.clone().unwrap_or_default();
    let answer = match request.name.as_ref() {
        "greet" => {
            let name = args.get("name").and_then(Value::as_str).unwrap_or("world");
            text(format!("Hello, {name}!"))
        }
        "test_simple_text" => text("This is a simple text response for testing."),
        "test_image_content" => Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::image(PNG, "image/png"),
        ]))),
        "test_audio_content" => Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::audio(WAV, "audio/wav"),
        ]))),
        "test_embedded_resource" => Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::resource(ResourceContents::text(
                "This is an embedded resource content.",
                "test://embedded-resource",
            )),
        ]))),
        "test_multiple_content_types" => {
            Ok(CallToolResponse::Complete(CallToolResult::success(vec![
                ContentBlock::text("Multiple content types test:"),
                ContentBlock::image(PNG, "image/png"),
                ContentBlock::resource(
                    ResourceContents::text(
                        r#"{"test":"data","value":123}"#,
                        "test://mixed-content-resource",
                    )
                    .with_mime_type("application/json"),
                ),
            ])))
        }
        "test_error_handling" => Ok(CallToolResponse::Complete(CallToolResult::error(vec![
            ContentBlock::text("This tool intentionally returns an error for testing"),
        ]))),
        "json_schema_2020_12_tool" => text("called with a JSON Schema 2020-12 input"),
        "test_logging_tool" => text("ran; logs go to the server's stderr, never to the client"),
        "test_missing_capability" => {
            if caps.as_ref().is_some_and(|c| c.sampling.is_some()) {
                text("the client can sample")
            } else {
                Err(McpError::new(
                    rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
                    "this tool needs the client's sampling capability: declare it",
                    Some(json!({"requiredCapabilities": {"sampling": {}}})),
                ))
            }
        }
        "test_streaming_elicitation" => match answered(request, "confirm") {
            Some(_) => text("answered"),
            None => ask(
                [(
                    "confirm",
                    elicit("Go ahead?", json!({"confirm": {"type": "boolean"}})),
                )],
                None,
            ),
        },
        "test_tool_with_task" => match answered(request, "user_name") {
            // The name gathered in the round trip goes into the task's arguments.
            Some(a) => {
                let name = a["content"]["name"].as_str().unwrap_or("").to_owned();
                let mut args = args;
                args.insert("_user_name".into(), json!(name));
                task_api::call_long(
                    tasks,
                    owner,
                    "test_tool_with_task",
                    args,
                    ctx,
                    &crate::mcp::work::Acting::default(),
                )
                .await
            }
            None => ask(
                [(
                    "user_name",
                    elicit("What is your name?", json!({"name": {"type": "string"}})),
                )],
                None,
            ),
        },
        name if MRTR.contains(&name) => round_trip(name, request, caps.as_ref()),
        _ => return None,
    };
    Some(answer)
}

/// The client's answer to `key`, when it is an answer at all (an object).
fn answered<'a>(request: &'a CallToolRequestParams, key: &str) -> Option<&'a Value> {
    request
        .input_responses
        .as_ref()
        .and_then(|r| r.get(key))
        .filter(|a| a.is_object())
}

/// An `InputRequiredResult` asking `requests`, carrying `state` sealed.
fn ask<'a>(
    requests: impl IntoIterator<Item = (&'a str, Value)>,
    state: Option<&str>,
) -> Result<CallToolResponse, McpError> {
    let mut asked = InputRequests::new();
    for (key, request) in requests {
        let request: InputRequest = serde_json::from_value(request)
            .map_err(|e| McpError::internal_error(format!("bad input request: {e}"), None))?;
        asked.insert(key.to_owned(), request);
    }
    Ok(CallToolResponse::InputRequired(InputRequiredResult::new(
        Some(asked),
        state.map(seal),
    )))
}

/// The SEP-2322 fixtures: ask in round 1 (only what the client can answer), answer once every
/// request of the round has an answer; `requestState` must come back unchanged.
fn round_trip(
    name: &str,
    request: &CallToolRequestParams,
    caps: Option<&ClientCapabilities>,
) -> Result<CallToolResponse, McpError> {
    let state = match &request.request_state {
        None => None,
        Some(s) => Some(open(s).ok_or_else(|| {
            McpError::invalid_params(
                "requestState was changed: send back the one the server gave, unchanged",
                None,
            )
        })?),
    };
    let has = |key: &str| answered(request, key).is_some();
    let name_q = || elicit("What is your name?", json!({"name": {"type": "string"}}));
    match name {
        "test_input_required_result_elicitation" => match answered(request, "user_name") {
            Some(a) => text(format!(
                "Hello, {}!",
                a["content"]["name"].as_str().unwrap_or("")
            )),
            None => ask([("user_name", name_q())], None),
        },
        "test_input_required_result_sampling" => match answered(request, "capital_question") {
            Some(a) => text(format!(
                "The client answered: {}",
                a["content"]["text"].as_str().unwrap_or("")
            )),
            None => ask(
                [("capital_question", sample("What is the capital of France?"))],
                None,
            ),
        },
        "test_input_required_result_list_roots" => match answered(request, "client_roots") {
            Some(a) => text(format!("The client's roots: {}", a["roots"])),
            None => ask([("client_roots", roots())], None),
        },
        "test_input_required_result_request_state"
        | "test_input_required_result_tampered_state" => match (state.as_deref(), has("confirm")) {
            (Some("confirm"), true) => text("state-ok: the request state came back intact"),
            _ => ask(
                [(
                    "confirm",
                    elicit("Go ahead?", json!({"ok": {"type": "boolean"}})),
                )],
                Some("confirm"),
            ),
        },
        "test_input_required_result_multiple_inputs" => {
            let all = ["user_name", "capital_question", "client_roots"];
            match state.as_deref() {
                Some("multiple") if all.iter().all(|k| has(k)) => text("all three answered"),
                _ => {
                    let mut requests = Vec::new();
                    if caps.is_none_or(|c| c.elicitation.is_some()) {
                        requests.push(("user_name", name_q()));
                    }
                    if caps.is_none_or(|c| c.sampling.is_some()) {
                        requests
                            .push(("capital_question", sample("What is the capital of France?")));
                    }
                    if caps.is_none_or(|c| c.roots.is_some()) {
                        requests.push(("client_roots", roots()));
                    }
                    if requests.len() < all.len() {
                        return Err(McpError::invalid_params(
                            "this tool needs the elicitation, sampling and roots capabilities",
                            None,
                        ));
                    }
                    ask(requests, Some("multiple"))
                }
            }
        }
        "test_input_required_result_capabilities" => {
            // Only what the client declared it can answer.
            let mut requests = Vec::new();
            if caps.is_some_and(|c| c.elicitation.is_some()) && !has("user_name") {
                requests.push(("user_name", name_q()));
            }
            if caps.is_some_and(|c| c.sampling.is_some()) && !has("capital_question") {
                requests.push(("capital_question", sample("What is the capital of France?")));
            }
            if requests.is_empty() {
                text("nothing left to ask this client")
            } else {
                ask(requests, None)
            }
        }
        _ => match (state.as_deref(), has("step1"), has("step2")) {
            (Some("round2"), _, true) => text("both steps answered"),
            (Some("round1"), true, _) => ask(
                [(
                    "step2",
                    elicit(
                        "Step 2: What is your favorite color?",
                        json!({"color": {"type": "string"}}),
                    ),
                )],
                Some("round2"),
            ),
            _ => ask(
                [(
                    "step1",
                    elicit(
                        "Step 1: What is your name?",
                        json!({"name": {"type": "string"}}),
                    ),
                )],
                Some("round1"),
            ),
        },
    }
}

/// The key `requestState` is sealed with, random per process.
fn key() -> &'static [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut k = [0u8; 32];
        getrandom::fill(&mut k).expect("the operating system provides randomness");
        k
    })
}

/// HMAC-SHA-256 of `message` under the process key, in hex.
fn mac(message: &str) -> String {
    let block = |pad: u8| -> Vec<u8> {
        let mut b = vec![pad; 64];
        for (i, k) in key().iter().enumerate() {
            b[i] ^= k;
        }
        b
    };
    let inner = Sha256::new()
        .chain_update(block(0x36))
        .chain_update(message.as_bytes())
        .finalize();
    let outer = Sha256::new()
        .chain_update(block(0x5c))
        .chain_update(inner)
        .finalize();
    outer.iter().map(|b| format!("{b:02x}")).collect()
}

fn seal(state: &str) -> String {
    format!("{state}.{}", mac(state))
}

fn open(sealed: &str) -> Option<String> {
    let (state, tag) = sealed.rsplit_once('.')?;
    (mac(state) == tag).then(|| state.to_owned())
}

/// The fixture resources: `test://static-text`, `test://static-binary` and the template
/// `test://template/{id}/data`; `None` for any other URI.
pub(crate) fn read_resource(uri: &str) -> Option<ReadResourceResult> {
    let contents = match uri {
        "test://static-text" => {
            ResourceContents::text("This is the content of the static text resource.", uri)
        }
        "test://static-binary" => ResourceContents::blob(PNG, uri).with_mime_type("image/png"),
        _ => {
            let id = uri
                .strip_prefix("test://template/")?
                .strip_suffix("/data")?;
            ResourceContents::text(json!({"id": id, "templateTest": true}).to_string(), uri)
                .with_mime_type("application/json")
        }
    };
    Some(ReadResourceResult::new(vec![contents]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_state_comes_back_only_unchanged() {
        let sealed = seal("round1");
        assert_eq!(open(&sealed).as_deref(), Some("round1"));
        assert_eq!(open(&format!("{sealed}-TAMPERED")), None);
        assert_eq!(open(&sealed.replace("round1", "round2")), None);
        assert_eq!(open("round1"), None);
    }

    #[test]
    fn input_requests_are_ones_a_client_can_answer() {
        for request in [
            elicit("Name?", json!({"name": {"type": "string"}})),
            sample("Capital?"),
            roots(),
        ] {
            let parsed = serde_json::from_value::<InputRequest>(request.clone());
            assert!(parsed.is_ok(), "{request}: {parsed:?}");
        }
    }

    #[test]
    fn fixture_resources_answer_their_uris_only() {
        assert!(read_resource("test://static-text").is_some());
        assert!(read_resource("test://static-binary").is_some());
        let r = read_resource("test://template/123/data").expect("template");
        let v = serde_json::to_value(&r).expect("json");
        assert!(
            v["contents"][0]["text"]
                .as_str()
                .unwrap_or("")
                .contains("123")
        );
        assert!(read_resource("memory://default/m_1").is_none());
    }
}
