//! Malformed and random parameters, from a seeded generator, for `tasks/get`, `tasks/cancel`,
//! `tasks/update` and every tool's arguments, in both eras: every request gets exactly one answer,
//! none is an internal error, and a normal call is served afterwards.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::support::{Era, Raw, TestDb, error_code, modern_meta};

/// Requests per era.
const TOOL_CALLS: usize = 240;
const TASK_CALLS: usize = 180;
/// Requests in flight at once.
const WAVE: usize = 30;

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const PIECES: [&str; 16] = [
    "é", "日本", "🦦", "\u{200d}", "\u{202e}", "e\u{301}", "\u{0}", "\\", "\"", "\n", "ß", "Ω",
    "m_", "{\"a\":", "../", "%00",
];
const KEYS: [&str; 12] = [
    "content", "ids", "names", "query", "limit", "depth", "taskId", "source", "path", "text",
    "_meta", "x",
];

fn text(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => String::new(),
        1 => " \t\n".into(),
        2 => (0..rng.below(12) + 1).map(|_| *rng.pick(&PIECES)).collect(),
        3 => rng.pick(&PIECES).repeat(rng.below(40_000) + 1),
        4 => format!("m_{:020x}", rng.next()),
        5 => format!("{:016x}{:016x}", rng.next(), rng.next()),
        6 => format!("memory://{}/{:x}", rng.pick(&PIECES), rng.next()),
        _ => (0..rng.below(20) + 1)
            .map(|_| char::from(b'a' + rng.below(26) as u8))
            .collect(),
    }
}

fn number(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => json!(u64::MAX),
        1 => json!(i64::MIN),
        2 => json!(1e308),
        3 => json!(-1e308),
        4 => json!(9_007_199_254_740_993_u64),
        5 => json!(0.5),
        6 => json!(-0.0),
        7 => json!(-(rng.below(1_000) as i64) - 1),
        _ => json!(rng.below(200)),
    }
}

/// Any JSON value, nested at most `depth` levels.
fn junk(rng: &mut Rng, depth: usize) -> Value {
    let kinds = if depth == 0 { 5 } else { 7 };
    match rng.below(kinds) {
        0 => Value::Null,
        1 => json!(rng.chance(50)),
        2 => number(rng),
        3 | 4 => Value::String(text(rng)),
        5 => Value::Array((0..rng.below(5)).map(|_| junk(rng, depth - 1)).collect()),
        _ => {
            let mut o = Map::new();
            for _ in 0..rng.below(5) {
                o.insert((*rng.pick(&KEYS)).to_owned(), junk(rng, depth - 1));
            }
            Value::Object(o)
        }
    }
}

/// A value shaped by `schema`, or junk in its place now and then.
fn shaped(schema: &Value, rng: &mut Rng, depth: usize) -> Value {
    if depth == 0 || rng.chance(25) {
        return junk(rng, depth.min(3));
    }
    if let Some(options) = schema["enum"].as_array()
        && !options.is_empty()
    {
        return options[rng.below(options.len())].clone();
    }
    match schema["type"].as_str().unwrap_or("") {
        "integer" | "number" => number(rng),
        "boolean" => json!(rng.chance(50)),
        "string" => Value::String(text(rng)),
        "array" => Value::Array(
            (0..rng.below(4))
                .map(|_| shaped(&schema["items"], rng, depth - 1))
                .collect(),
        ),
        "object" => object_from(schema, rng, depth - 1),
        _ => junk(rng, depth.min(3)),
    }
}

/// An object with some of the schema's properties (required ones too may be missing), now and
/// then a key the schema does not know.
fn object_from(schema: &Value, rng: &mut Rng, depth: usize) -> Value {
    let mut o = Map::new();
    if let Some(props) = schema["properties"].as_object() {
        for (name, sub) in props {
            if rng.chance(55) {
                o.insert(name.clone(), shaped(sub, rng, depth));
            }
        }
    }
    if rng.chance(15) {
        o.insert((*rng.pick(&KEYS)).to_owned(), junk(rng, 2));
    }
    Value::Object(o)
}

/// `_meta` for a request of `era`: right most of the time, wrong now and then.
fn meta(rng: &mut Rng, era: Era) -> Option<Value> {
    match (era, rng.below(10)) {
        (Era::Discover, 0) => Some(junk(rng, 2)),
        (Era::Discover, 1) => None,
        (Era::Discover, _) => Some(modern_meta("fuzz")),
        (Era::Initialize, 0) => Some(junk(rng, 2)),
        (Era::Initialize, _) => None,
    }
}

fn with_meta(mut params: Value, meta: Option<Value>) -> Value {
    if let (Value::Object(p), Some(m)) = (&mut params, meta) {
        p.insert("_meta".into(), m);
    }
    params
}

fn tool_call(rng: &mut Rng, era: Era, tools: &[(String, Value)]) -> Value {
    let (name, schema) = rng.pick(tools).clone();
    let name = if rng.chance(5) {
        Value::String(text(rng))
    } else {
        Value::String(name)
    };
    let arguments = match rng.below(12) {
        0 => junk(rng, 2),
        1 => json!({}),
        _ => object_from(&schema, rng, 4),
    };
    let mut params = json!({"name": name, "arguments": arguments});
    if rng.chance(5) {
        params.as_object_mut().expect("object").remove("name");
    }
    with_meta(params, meta(rng, era))
}

fn task_request(rng: &mut Rng, era: Era) -> (&'static str, Value) {
    let method = *rng.pick(&["tasks/get", "tasks/cancel", "tasks/update"]);
    let params = if rng.chance(20) {
        junk(rng, 3)
    } else {
        let mut p = Map::new();
        if !rng.chance(10) {
            let id = if rng.chance(70) {
                Value::String(text(rng))
            } else {
                junk(rng, 2)
            };
            p.insert("taskId".into(), id);
        }
        if method == "tasks/update" || rng.chance(10) {
            p.insert("inputResponses".into(), junk(rng, 2));
        }
        with_meta(Value::Object(p), meta(rng, era))
    };
    (method, params)
}

/// Every tool with its input schema, from `tools/list`.
async fn tools(raw: &mut Raw) -> Vec<(String, Value)> {
    let listed = raw.call("tools/list", json!({})).await;
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|t| {
            (
                t["name"].as_str().expect("tool name").to_owned(),
                t["inputSchema"].clone(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_params_always_get_one_answer_and_the_server_goes_on() {
    for (era, seed) in [(Era::Initialize, 0x5eed_0001), (Era::Discover, 0x5eed_0002)] {
        let db = TestDb::new();
        let mut raw = Raw::open(&db.path, era).await;
        // Something to find, relate and walk.
        let stored = raw
            .call(
                "tools/call",
                json!({"name": "remember", "arguments": {"memories": [
                    {"content": "Ada keeps the lighthouse log", "name": "ada"},
                    {"content": "The lighthouse stands on the north cape", "name": "lighthouse",
                     "links": [{"to": "ada", "kind": "kept_by"}]}]}}),
            )
            .await;
        assert_eq!(stored["result"]["structuredContent"]["ok"], 2, "{stored}");
        let tools = tools(&mut raw).await;
        assert!(tools.len() >= 10, "{tools:?}");

        let mut rng = Rng(seed);
        let mut requests: Vec<Value> = Vec::new();
        let (mut tool_left, mut task_left) = (TOOL_CALLS, TASK_CALLS);
        while tool_left + task_left > 0 {
            let id = json!(raw.next_id());
            let (method, params) = if rng.below(tool_left + task_left) < tool_left {
                tool_left -= 1;
                ("tools/call", tool_call(&mut rng, era, &tools))
            } else {
                task_left -= 1;
                task_request(&mut rng, era)
            };
            requests.push(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        }

        let mut answers: HashMap<i64, Value> = HashMap::new();
        let mut problems = Vec::new();
        for wave in requests.chunks(WAVE) {
            for r in wave {
                raw.send(r).await;
            }
            for r in wave {
                let id = &r["id"];
                let Some(answer) = raw.reply_within(id, Duration::from_secs(60)).await else {
                    panic!("{era:?}: no answer to {}\n{}", short(r), raw.log_tail());
                };
                if let Some(code) = error_code(&answer) {
                    let message = answer["error"]["message"].as_str().unwrap_or_default();
                    if code == -32603 || message.is_empty() {
                        problems.push(format!("{} → {}", short(r), short(&answer)));
                    }
                } else if answer.get("result").is_none() {
                    problems.push(format!(
                        "{} → neither result nor error: {}",
                        short(r),
                        short(&answer)
                    ));
                }
                answers.insert(id.as_i64().expect("integer id"), answer);
            }
        }
        assert_eq!(answers.len(), requests.len(), "{era:?}");
        // The generator reaches the tools and the task store, not only the envelope checks.
        let count = |f: &dyn Fn(&Value, &Value) -> bool| {
            requests
                .iter()
                .filter(|r| f(r, &answers[&r["id"].as_i64().expect("id")]))
                .count()
        };
        let tool_results = count(&|r, a| r["method"] == "tools/call" && a.get("result").is_some());
        let tool_errors =
            count(&|r, a| r["method"] == "tools/call" && a["result"]["isError"] == true);
        let unknown_tasks = count(&|_, a| {
            a["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("unknown task"))
        });
        let summary = format!(
            "{era:?}: {tool_results} tool results ({tool_errors} with isError), {unknown_tasks} unknown tasks"
        );
        assert!(tool_results >= TOOL_CALLS / 3, "{summary}");
        // A good share of the calls reach the tools' own checks (and fail there).
        assert!(tool_errors >= TOOL_CALLS / 5, "{summary}");
        assert!(unknown_tasks >= TASK_CALLS / 5, "{summary}");
        assert!(
            problems.is_empty(),
            "{era:?}: {} answers were internal errors or empty:\n{}\n{}",
            problems.len(),
            problems.join("\n"),
            raw.log_tail()
        );

        // A normal call is served afterwards.
        let found = raw
            .call(
                "tools/call",
                json!({"name": "recall", "arguments": {"query": "lighthouse log", "mode": "text"}}),
            )
            .await;
        assert!(
            found["result"]["structuredContent"]["hits"]
                .as_array()
                .is_some_and(|h| !h.is_empty()),
            "{era:?}: {found}"
        );
        // Nothing was answered twice.
        let rest = raw.close().await;
        let extra: Vec<&Value> = rest.iter().filter(|m| m.get("method").is_none()).collect();
        assert!(extra.is_empty(), "{era:?}: second answers {extra:?}");
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 300 {
        format!(
            "{}…",
            &s[..s.char_indices().nth(300).map_or(s.len(), |(i, _)| i)]
        )
    } else {
        s
    }
}
