//! Property: every member the gate reads, in every place it can appear (the body's top level,
//! the `conversation` object, any item of `input`, a tool), repeated with another value or
//! written so that a case-insensitive reader takes it for that member (re-cased, with a control
//! or zero-width character, a letter that folds to it), in either order and spelt with JSON
//! escapes or not, is refused: 400 `invalid_input` with `param` naming it, before anything is
//! looked up (docs/security.md#one-strict-reading). A provider keeps the last of two members,
//! Go's reader matches names without regard to case; either would let the gate judge one value
//! and the provider act on another.

use proptest::prelude::*;

use crate::gate::parse;

/// Where a member is written, and the members the gate reads there.
#[derive(Debug, Clone, Copy)]
enum Place {
    Top,
    Conversation,
    Item(usize),
    Tool,
}

const TOP: &[&str] = &["model", "input", "tools", "previous_response_id", "conversation"];
const CONVERSATION: &[&str] = &["id"];
const ITEM: &[&str] = &[
    "type",
    "id",
    "call_id",
    "name",
    "status",
    "role",
    "arguments",
    "content",
    "output",
    "tool_calls",
    "encrypted_content",
];
const TOOL: &[&str] = &["type", "name", "parameters"];

/// The items of the body, one of each kind the gate tells apart.
const ITEMS: &[&str] = &[
    r#""type":"message","id":"msg_0123456789abcdef","role":"user","content":"hi""#,
    r#""type":"reasoning","id":"rs_0123456789abcdef","summary":[],"encrypted_content":"gAAA""#,
    r#""type":"function_call","id":"fc_0123456789abcdef","call_id":"c1","name":"f","arguments":"{}","status":"completed""#,
    r#""type":"function_call_output","call_id":"c1","output":"ok""#,
    r#""type":"item_reference","id":"msg_fedcba9876543210""#,
    r#""type":"compaction","encrypted_content":"cAAA""#,
    r#""type":"acme:trace","id":"tr_0123456789abcdef","output":[]"#,
];

/// How the extra member is written.
#[derive(Debug, Clone)]
enum Extra {
    /// The same name again.
    Repeat,
    /// Each letter's case flipped where the mask says (at least one).
    Recase(u32),
    /// A control or zero-width character put in at a position.
    Invisible(char, usize),
    /// `s` as the long s, `k` as the Kelvin sign (the first such letter).
    Folding,
}

/// The name `extra` writes for `name`, as JSON text (with escapes when `escaped`); `None` when
/// that way of writing does not apply to the name.
fn extra_name(name: &str, extra: &Extra, escaped: bool) -> Option<String> {
    let written: String = match extra {
        Extra::Repeat => name.to_owned(),
        Extra::Recase(mask) => {
            let letters = name.chars().filter(char::is_ascii_alphabetic).count() as u32;
            let mask = mask % ((1 << letters.min(20)) - 1) + 1;
            let mut seen = 0;
            name.chars()
                .map(|c| match c.is_ascii_alphabetic() {
                    true => {
                        seen += 1;
                        match mask & (1 << ((seen - 1) % 20)) != 0 {
                            true => c.to_ascii_uppercase(),
                            false => c,
                        }
                    }
                    false => c,
                })
                .collect()
        }
        Extra::Invisible(c, at) => {
            let at = at % (name.len() + 1);
            format!("{}{c}{}", &name[..at], &name[at..])
        }
        Extra::Folding => {
            let at = name.find(['s', 'k'])?;
            let folded = match &name[at..at + 1] {
                "s" => '\u{017F}',
                _ => '\u{212A}',
            };
            format!("{}{folded}{}", &name[..at], &name[at + 1..])
        }
    };
    Some(match escaped {
        // Every character as a \u escape: the name a reader decodes is the same.
        true => written
            .encode_utf16()
            .map(|unit| format!("\\u{unit:04x}"))
            .collect(),
        false => serde_json::to_string(&written)
            .unwrap()
            .trim_matches('"')
            .to_owned(),
    })
}

/// The body, with `"NAME":"dup"` (NAME from `extra_name`) written before or after the members
/// at `place`; and the `param` its refusal must name.
fn body(place: Place, name: &str, extra_json_name: &str, first: bool) -> (String, String) {
    let member = format!(r#""{extra_json_name}":"dup""#);
    let join = |members: &str| match first {
        true => format!("{member},{members}"),
        false => format!("{members},{member}"),
    };
    let items: Vec<String> = ITEMS
        .iter()
        .enumerate()
        .map(|(i, item)| match place {
            Place::Item(at) if at == i => format!("{{{}}}", join(item)),
            _ => format!("{{{item}}}"),
        })
        .collect();
    let tool = r#""type":"function","name":"f","parameters":{"type":"object"}"#;
    let tool = match place {
        Place::Tool => format!("{{{}}}", join(tool)),
        _ => format!("{{{tool}}}"),
    };
    let conversation = r#""id":"conv_0123""#;
    let conversation = match place {
        Place::Conversation => format!("{{{}}}", join(conversation)),
        _ => format!("{{{conversation}}}"),
    };
    let top = format!(
        r#""model":"m","previous_response_id":"resp_1","conversation":{conversation},"tools":[{tool}],"input":[{}]"#,
        items.join(",")
    );
    let top = match place {
        Place::Top => join(&top),
        _ => top,
    };
    let param = match place {
        Place::Top => name.to_owned(),
        Place::Conversation => "conversation.id".to_owned(),
        Place::Item(at) => format!("input[{at}].{name}"),
        Place::Tool => "tools[0]".to_owned(),
    };
    (format!("{{{top}}}"), param)
}

fn place() -> impl Strategy<Value = (Place, &'static str)> {
    prop_oneof![
        proptest::sample::select(TOP).prop_map(|name| (Place::Top, name)),
        proptest::sample::select(CONVERSATION).prop_map(|name| (Place::Conversation, name)),
        (0..ITEMS.len(), proptest::sample::select(ITEM)).prop_map(|(at, name)| (Place::Item(at), name)),
        proptest::sample::select(TOOL).prop_map(|name| (Place::Tool, name)),
    ]
}

fn extra() -> impl Strategy<Value = Extra> {
    prop_oneof![
        Just(Extra::Repeat),
        any::<u32>().prop_map(Extra::Recase),
        (
            proptest::sample::select(&['\u{0}', '\u{1f}', '\u{200b}', '\u{feff}', '\u{ad}', '\u{2060}'][..]),
            0usize..32,
        )
            .prop_map(|(c, at)| Extra::Invisible(c, at)),
        Just(Extra::Folding),
    ]
}

#[test]
fn the_base_body_is_read() {
    let (body, _) = body(Place::Top, "model", "other", false);
    parse(body.as_bytes()).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn a_repeated_or_re_spelt_member_the_gate_reads_is_refused_where_it_stands(
        (place, name) in place(),
        extra in extra(),
        escaped in any::<bool>(),
        first in any::<bool>(),
    ) {
        let Some(written) = extra_name(name, &extra, escaped) else {
            return Ok(());
        };
        // A repeat needs the member written once already; a re-spelt name is refused anyway.
        let present = match place {
            Place::Item(at) => ITEMS[at].contains(&format!("\"{name}\":")),
            Place::Top | Place::Conversation | Place::Tool => true,
        };
        if matches!(extra, Extra::Repeat) && !present {
            return Ok(());
        }
        let (body, param) = body(place, name, &written, first);
        let error = parse(body.as_bytes()).expect_err(&body);
        prop_assert_eq!(
            (error.code(), error.param()),
            ("invalid_input", Some(param.as_str())),
            "{} for {}", error, body
        );
    }
}
