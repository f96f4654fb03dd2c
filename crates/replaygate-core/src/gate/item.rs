//! Reading one `input` item: the members the rules look at, and what kind of item it is.

use std::cell::Cell;
use std::fmt;

use serde_json::value::RawValue;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::shape::{KnownName, ListInPlace, ListValue, Member, MemberValue, Name, Shape};
use crate::json::{member_names, Field, JsonKind, RawField};

/// The kind of an input item, as the rules see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemClass {
    /// `message`, typed or typeless (`role` without `type`).
    Message,
    /// `function_call`.
    FunctionCall,
    /// `function_call_output`.
    FunctionCallOutput,
    /// `reasoning`.
    Reasoning,
    /// `compaction`.
    Compaction,
    /// `item_reference`, typed or typeless (only an `id`).
    ItemReference,
    /// Any other type: namespaced (`slug:name`), or a bare non-portable type such as
    /// `web_search_call`, which belongs to `openai`.
    Extension,
}

/// The slug that bare, non-portable item types (OpenAI's hosted tool calls) belong to.
pub const BARE_TYPE_NAMESPACE: &str = "openai";

/// One item of `input`, holding only the members the gate judges.
#[derive(Debug, Clone)]
pub struct Item<'a> {
    /// What kind of item this is.
    pub class: ItemClass,
    /// `type`.
    pub kind: Field<'a>,
    /// `id`.
    pub id: Field<'a>,
    /// `call_id`.
    pub call_id: Field<'a>,
    /// `name`.
    pub name: Field<'a>,
    /// `status`.
    pub status: Field<'a>,
    /// `role`.
    pub role: Field<'a>,
    /// `arguments`, kept as written (a string's JSON text is decoded only when it is judged).
    pub arguments: RawField<'a>,
    /// Whether a `tool_calls` member is present (Chat Completions shape).
    pub has_tool_calls: bool,
    /// `encrypted_content` (a reasoning or compaction item's provider-bound blob), its exact
    /// JSON text, null included; `None` when absent.
    pub encrypted_content: Option<Opaque<'a>>,
    /// Where the item's members are in the request's [`Shape`] (every member, in the order
    /// written), for item profiles.
    pub members: std::ops::Range<u32>,
    /// Whether the item's members are all kept here but its part lists, for item profiles.
    pub layout: MemberLayout,
    /// The names of the members written, as a set of [`KnownName::bit`]s (any other name is
    /// [`KnownName::Other`]'s), so a member's absence is told without reading its field.
    pub present: u16,
}

/// How an item's members were written, for the item profiles' clean walk: an item whose
/// members are all kept in the [`Item`] (each written once, as the reader holds them to) is
/// tested field by field, with only its part lists looked up among its members.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberLayout {
    /// A member is neither kept in the item nor a part list (another name, `summary`,
    /// `tool_calls`): the walk looks at every member.
    Mixed,
    /// Every member is kept in the item but `content` and `output`, whose positions among
    /// the item's members are these (`u8::MAX`: absent).
    Kept {
        /// The part lists' positions.
        lists: [u8; 2],
    },
}

/// A member's exact JSON text, which debug output shows by its length only (it may be a
/// provider's encrypted state).
#[derive(Clone, Copy)]
pub struct Opaque<'a>(pub &'a RawValue);

impl<'a> Opaque<'a> {
    /// The JSON text.
    pub fn get(&self) -> &'a str {
        self.0.get()
    }
}

impl fmt::Debug for Opaque<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0.get().len())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Opaque<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(deserializer).map(Opaque)
    }
}

/// What an item is in call pairing (docs/reasons.md#call_id_mismatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing<'i> {
    /// A call with this `call_id` (`function_call`, `custom_tool_call`, `computer_call`, ...).
    Call(&'i str),
    /// An output (`function_call_output` or another `*_output` type) answering a call.
    Output,
    /// Neither.
    None,
}

impl<'a> Item<'a> {
    /// The item's type as reported in violations.
    pub fn type_name(&self) -> &str {
        match (self.kind.as_str(), self.class) {
            (Some(kind), _) => kind,
            (None, ItemClass::ItemReference) => "item_reference",
            (None, _) => "message",
        }
    }

    /// The provider namespace an extension item belongs to.
    pub fn namespace(&self) -> Option<&str> {
        if self.class != ItemClass::Extension {
            return None;
        }
        let kind = self.kind.as_str()?;
        Some(match kind.split_once(':') {
            Some((slug, _)) => slug,
            None => BARE_TYPE_NAMESPACE,
        })
    }

    /// `id` when it is a string.
    pub fn id(&self) -> Option<&str> {
        self.id.as_str()
    }

    /// `call_id` when it is a string.
    pub fn call_id(&self) -> Option<&str> {
        self.call_id.as_str()
    }

    /// Whether this item is a call, an output, or neither. An output is a `function_call_output`
    /// or any other type ending in `_output`; a call is any other item with a string `call_id`.
    pub fn pairing(&self) -> Pairing<'_> {
        let is_output = match self.class {
            ItemClass::FunctionCallOutput => true,
            ItemClass::Extension => self.kind.as_str().is_some_and(|k| k.ends_with("_output")),
            _ => false,
        };
        match (is_output, self.call_id()) {
            (true, _) => Pairing::Output,
            (false, Some(call_id)) => Pairing::Call(call_id),
            (false, None) => Pairing::None,
        }
    }
}

pub(crate) fn classify_type(kind: &str) -> ItemClass {
    match kind {
        "message" => ItemClass::Message,
        "function_call" => ItemClass::FunctionCall,
        "function_call_output" => ItemClass::FunctionCallOutput,
        "reasoning" => ItemClass::Reasoning,
        "compaction" => ItemClass::Compaction,
        "item_reference" => ItemClass::ItemReference,
        _ => ItemClass::Extension,
    }
}

/// The members read from an item object, before it is classified.
struct Members<'a> {
    kind: Option<Field<'a>>,
    id: Option<Field<'a>>,
    call_id: Option<Field<'a>>,
    name: Option<Field<'a>>,
    status: Option<Field<'a>>,
    role: Option<Field<'a>>,
    arguments: Option<RawField<'a>>,
    content: Option<ListValue<'a>>,
    output: Option<ListValue<'a>>,
    tool_calls: Option<IgnoredAny>,
    encrypted_content: Option<Opaque<'a>>,
    others: usize,
    /// The names read, as [`Item::present`] holds them.
    present: u16,
    /// Where `content` and `output` were written among the members (`u8::MAX`: not yet, or
    /// past the 255th member).
    lists: [u8; 2],
}

impl Default for Members<'_> {
    fn default() -> Self {
        Members {
            kind: None,
            id: None,
            call_id: None,
            name: None,
            status: None,
            role: None,
            arguments: None,
            content: None,
            output: None,
            tool_calls: None,
            encrypted_content: None,
            others: 0,
            present: 0,
            lists: [u8::MAX; 2],
        }
    }
}

impl<'a> Members<'a> {
    fn into_item(self, members: std::ops::Range<u32>) -> Result<Item<'a>, &'static str> {
        let kind = self.kind.unwrap_or_default();
        let id = self.id.unwrap_or_default();
        let role = self.role.unwrap_or_default();
        let class = match &kind {
            Field::Str(k) => classify_type(k),
            Field::Absent | Field::Other(JsonKind::Null) => {
                let only_id = matches!(id, Field::Str(_))
                    && self.others == 0
                    && self.content.is_none()
                    && self.output.is_none()
                    && self.call_id.is_none()
                    && self.name.is_none()
                    && self.status.is_none()
                    && self.arguments.is_none()
                    && self.encrypted_content.is_none();
                if !role.is_absent_or_null() || self.tool_calls.is_some() {
                    ItemClass::Message
                } else if only_id && role == Field::Absent {
                    ItemClass::ItemReference
                } else {
                    return Err("an item without `type` must be a message (`role` and `content`) or an item_reference (only `id`)");
                }
            }
            Field::Other(_) => return Err("an item's `type` must be a string"),
        };
        let kept = |list: &Option<ListValue<'_>>, at: u8| list.is_none() || at != u8::MAX;
        let layout = if self.others == 0
            && self.tool_calls.is_none()
            && kept(&self.content, self.lists[0])
            && kept(&self.output, self.lists[1])
        {
            MemberLayout::Kept { lists: self.lists }
        } else {
            MemberLayout::Mixed
        };
        Ok(Item {
            class,
            kind,
            id,
            call_id: self.call_id.unwrap_or_default(),
            name: self.name.unwrap_or_default(),
            status: self.status.unwrap_or_default(),
            role,
            arguments: self.arguments.unwrap_or_default(),
            has_tool_calls: self.tool_calls.is_some(),
            encrypted_content: self.encrypted_content,
            members,
            layout,
            present: self.present,
        })
    }
}

member_names! {
    /// Member names of an item, matched without allocating.
    Key {
        Type = "type",
        Id = "id",
        CallId = "call_id",
        Name = "name",
        Status = "status",
        Role = "role",
        Arguments = "arguments",
        Content = "content",
        Output = "output",
        ToolCalls = "tool_calls",
        EncryptedContent = "encrypted_content",
    }
}

impl Key {
    /// The name's number for item profiles (`summary` and other names are [`KnownName::Other`]
    /// here; the reader numbers `summary` where it reads it).
    fn known_name(&self) -> KnownName {
        match self {
            Key::Type => KnownName::Type,
            Key::Id => KnownName::Id,
            Key::CallId => KnownName::CallId,
            Key::Name => KnownName::Name,
            Key::Status => KnownName::Status,
            Key::Role => KnownName::Role,
            Key::Arguments => KnownName::Arguments,
            Key::Content => KnownName::Content,
            Key::Output => KnownName::Output,
            Key::ToolCalls => KnownName::ToolCalls,
            Key::EncryptedContent => KnownName::EncryptedContent,
            Key::Misspelled(_) | Key::Other => KnownName::Other,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Item<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ItemVisitor)
    }
}

/// Reads one item and appends it to a list, so the item is built where it is kept instead of
/// being returned through the reader's layers (an item is some 180 bytes; a long history has
/// thousands).
pub struct PushItem<'v, 'a> {
    /// The list the item is appended to.
    pub items: &'v mut Vec<Item<'a>>,
    /// Where the item's member names (and its content parts) are recorded.
    pub shape: &'v mut Shape<'a>,
    /// Set to the member at fault when the item is refused for a repeated member, or one that
    /// reads as a member the gate reads to a case-insensitive reader.
    pub fault: &'v Cell<Option<&'static str>>,
}

impl<'de: 'a, 'a> DeserializeSeed<'de> for PushItem<'_, 'a> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for PushItem<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an input item object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let (members, at) = read_members(map, self.shape, self.fault)?;
        let item = members.into_item(at).map_err(de::Error::custom)?;
        self.items.push(item);
        Ok(())
    }
}

struct ItemVisitor;

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Item<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an input item object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut shape = Shape::default();
        let (members, at) = read_members(map, &mut shape, &Cell::new(None))?;
        members.into_item(at).map_err(de::Error::custom)
    }
}

/// Reads an item's members, recording every member's name in `shape` in the order written
/// (the item's range there is returned with them).
///
/// A member written twice, or one that reads as a kept member to a case-insensitive reader,
/// is refused, and `fault` names it.
fn read_members<'de: 'a, 'a, A: MapAccess<'de>>(
    mut map: A,
    shape: &mut Shape<'a>,
    fault: &Cell<Option<&'static str>>,
) -> Result<(Members<'a>, std::ops::Range<u32>), A::Error> {
    let mut m = Members::default();
    let start = shape.item_members.len() as u32;
    while let Some(Name(name)) = map.next_key::<Name<'a>>()? {
        let mut value = MemberValue::InItem;
        let key = Key::from_name(&name);
        let mut known = key.known_name();
        match &key {
            Key::Misspelled(name) => fault.set(Some(name.gated)),
            Key::Other => {}
            _ if m.present & known.bit() != 0 => fault.set(Some(known.as_str())),
            _ => {}
        }
        match key {
            Key::Type => read_kept(&mut map, &mut m.kind, known, &mut m.present)?,
            Key::Id => read_kept(&mut map, &mut m.id, known, &mut m.present)?,
            Key::CallId => read_kept(&mut map, &mut m.call_id, known, &mut m.present)?,
            Key::Name => read_kept(&mut map, &mut m.name, known, &mut m.present)?,
            Key::Status => read_kept(&mut map, &mut m.status, known, &mut m.present)?,
            Key::Role => read_kept(&mut map, &mut m.role, known, &mut m.present)?,
            Key::Arguments => read_kept(&mut map, &mut m.arguments, known, &mut m.present)?,
            Key::Content => {
                let list = read_list(&mut map, m.content.is_some(), "content", shape)?;
                value = MemberValue::List(list.clone());
                m.content = Some(list);
                m.lists[0] = position(shape, start);
                m.present |= known.bit();
            }
            Key::Output => {
                let list = read_list(&mut map, m.output.is_some(), "output", shape)?;
                value = MemberValue::List(list.clone());
                m.output = Some(list);
                m.lists[1] = position(shape, start);
                m.present |= known.bit();
            }
            Key::ToolCalls => read_kept(&mut map, &mut m.tool_calls, known, &mut m.present)?,
            Key::EncryptedContent => read_kept(&mut map, &mut m.encrypted_content, known, &mut m.present)?,
            Key::Misspelled(name) => return Err(name.into_error()),
            Key::Other if name == "summary" => {
                value = MemberValue::List(map.next_value_seed(ListInPlace { shape })?);
                known = KnownName::Summary;
                m.others += 1;
                m.present |= known.bit();
            }
            Key::Other => {
                value = MemberValue::Raw(map.next_value()?);
                m.others += 1;
                m.present |= known.bit();
            }
        }
        shape.item_members.push(Member { name, known, value });
    }
    Ok((m, start..shape.item_members.len() as u32))
}

/// Reads the value of a member the item keeps into `slot`, adding its name to `present` (the
/// names read so far), where a name written twice is refused.
#[inline(always)]
fn read_kept<'de, A, T>(
    map: &mut A,
    slot: &mut Option<T>,
    name: KnownName,
    present: &mut u16,
) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    if *present & name.bit() != 0 {
        return Err(de::Error::custom(format_args!(
            "duplicate member `{}`",
            name.as_str()
        )));
    }
    *present |= name.bit();
    *slot = Some(map.next_value()?);
    Ok(())
}

/// The position among its item's members (which begin at `start`) of the member being read,
/// `u8::MAX` past the 255th.
fn position(shape: &Shape<'_>, start: u32) -> u8 {
    u8::try_from(shape.item_members.len() as u32 - start).unwrap_or(u8::MAX)
}

/// Reads a part list member that the gate reads once (`content`, `output`).
fn read_list<'de: 'a, 'a, A: MapAccess<'de>>(
    map: &mut A,
    seen: bool,
    key: &str,
    shape: &mut Shape<'a>,
) -> Result<ListValue<'a>, A::Error> {
    if seen {
        return Err(de::Error::custom(format_args!("duplicate member `{key}`")));
    }
    map.next_value_seed(ListInPlace { shape })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(json: &str) -> Item<'_> {
        serde_json::from_str(json).unwrap()
    }

    fn error(json: &str) -> String {
        serde_json::from_str::<Item<'_>>(json).unwrap_err().to_string()
    }

    #[test]
    fn typed_items_are_classified_by_type() {
        assert_eq!(
            item(r#"{"type":"message","role":"user","content":"hi"}"#).class,
            ItemClass::Message
        );
        assert_eq!(item(r#"{"type":"function_call"}"#).class, ItemClass::FunctionCall);
        assert_eq!(
            item(r#"{"type":"function_call_output"}"#).class,
            ItemClass::FunctionCallOutput
        );
        assert_eq!(
            item(r#"{"type":"reasoning","summary":[]}"#).class,
            ItemClass::Reasoning
        );
        assert_eq!(item(r#"{"type":"compaction"}"#).class, ItemClass::Compaction);
        assert_eq!(
            item(r#"{"type":"item_reference","id":"x"}"#).class,
            ItemClass::ItemReference
        );
    }

    #[test]
    fn namespaced_and_bare_extension_types_name_their_slug() {
        let ns = item(r#"{"type":"acme:search_result"}"#);
        assert_eq!((ns.class, ns.namespace()), (ItemClass::Extension, Some("acme")));
        let bare = item(r#"{"type":"web_search_call"}"#);
        assert_eq!(bare.namespace(), Some("openai"));
        let empty_slug = item(r#"{"type":":x"}"#);
        assert_eq!(empty_slug.namespace(), Some(""));
        assert_eq!(item(r#"{"type":"message"}"#).namespace(), None);
    }

    #[test]
    fn typeless_role_and_content_is_a_message() {
        let m = item(r#"{"role":"user","content":[{"type":"input_text","text":"hi"}]}"#);
        assert_eq!((m.class, m.type_name()), (ItemClass::Message, "message"));
        let null_type = item(r#"{"type":null,"role":"user","content":"hi"}"#);
        assert_eq!(null_type.class, ItemClass::Message);
    }

    #[test]
    fn typeless_tool_calls_is_read_as_a_message() {
        let m = item(r#"{"content":null,"tool_calls":[]}"#);
        assert!(m.has_tool_calls);
        assert_eq!(m.class, ItemClass::Message);
    }

    #[test]
    fn typeless_id_only_is_an_item_reference() {
        let r = item(r#"{"id":"msg_1"}"#);
        assert_eq!(
            (r.class, r.type_name()),
            (ItemClass::ItemReference, "item_reference")
        );
    }

    #[test]
    fn typeless_objects_of_no_known_shape_are_refused() {
        assert!(error(r#"{"id":"x","status":"completed"}"#).contains("without `type`"));
        assert!(error(r#"{}"#).contains("without `type`"));
        assert!(error(r#"{"type":5}"#).contains("must be a string"));
    }

    #[test]
    fn repeated_members_are_refused() {
        assert!(
            error(r#"{"type":"function_call","arguments":"{}","arguments":"{}"}"#)
                .contains("duplicate member `arguments`")
        );
    }

    #[test]
    fn every_member_kept_in_the_item_is_refused_when_written_twice() {
        // The item profiles' clean walk of a `Kept` item counts on it.
        for name in Key::NAMES {
            let json = format!(r#"{{"type":"message","{name}":null,"{name}":null}}"#);
            assert!(error(&json).contains("duplicate member"), "{name}");
        }
    }

    #[test]
    fn the_layout_says_where_part_lists_are_when_every_other_member_is_kept() {
        let message = item(r#"{"id":"m","type":"message","role":"user","content":[]}"#);
        assert_eq!(message.layout, MemberLayout::Kept { lists: [3, u8::MAX] });
        let output = item(r#"{"output":"ok","type":"function_call_output","call_id":"c"}"#);
        assert_eq!(output.layout, MemberLayout::Kept { lists: [u8::MAX, 0] });
        let call = item(r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}"#);
        assert_eq!(call.layout, MemberLayout::Kept { lists: [u8::MAX; 2] });
        for mixed in [
            r#"{"type":"reasoning","id":"rs","summary":[]}"#,
            r#"{"type":"function_call","call_id":"c","namespace":"n"}"#,
            r#"{"role":"assistant","content":null,"tool_calls":[]}"#,
        ] {
            assert_eq!(item(mixed).layout, MemberLayout::Mixed, "{mixed}");
        }
    }

    #[test]
    fn the_names_present_are_every_member_written_null_included() {
        let names = |json: &str| {
            let present = item(json).present;
            let mut names: Vec<KnownName> = KnownName::NAMED
                .into_iter()
                .filter(|name| present & name.bit() != 0)
                .collect();
            if present & KnownName::Other.bit() != 0 {
                names.push(KnownName::Other);
            }
            names
        };
        assert_eq!(
            names(r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{}","status":null}"#),
            [
                KnownName::Type,
                KnownName::CallId,
                KnownName::Name,
                KnownName::Status,
                KnownName::Arguments
            ]
        );
        assert_eq!(
            names(r#"{"role":"user","content":[],"phase":"final"}"#),
            [KnownName::Role, KnownName::Content, KnownName::Other]
        );
        assert_eq!(
            names(r#"{"type":"reasoning","summary":[],"encrypted_content":null}"#),
            [KnownName::Type, KnownName::EncryptedContent, KnownName::Summary]
        );
    }

    #[test]
    fn arguments_keep_their_json_text_or_their_kind() {
        let s = item(r#"{"type":"function_call","arguments":"{\"a\":1}"}"#);
        assert_eq!(s.arguments.encoded(), Some(r#""{\"a\":1}""#));
        let o = item(r#"{"type":"function_call","arguments":{"a":1}}"#);
        assert_eq!(o.arguments, RawField::Other(JsonKind::Object));
    }

    #[test]
    fn names_that_read_as_gated_members_are_refused() {
        for json in [
            r#"{"Type":"openai:web_search_call","type":"message","role":"user","content":"hi"}"#,
            r#"{"type":"function_call","CALL_ID":"c1"}"#,
            r#"{"type\u0000":"x:y","role":"user","content":"hi"}"#,
            r#"{"role":"user","Content":"hi"}"#,
        ] {
            assert!(error(json).contains("case-insensitive JSON readers"), "{json}");
        }
    }

    #[test]
    fn names_inside_content_and_arguments_are_data() {
        let m = item(r#"{"role":"user","content":[{"Type":"input_text","TEXT":"hi"}]}"#);
        assert_eq!(m.class, ItemClass::Message);
        let c = item(r#"{"type":"function_call","arguments":"{\"Type\":1}","metadata":{"INPUT":1}}"#);
        assert_eq!(c.class, ItemClass::FunctionCall);
    }

    #[test]
    fn calls_and_outputs_pair_by_call_id() {
        assert_eq!(
            item(r#"{"type":"function_call","call_id":"c1"}"#).pairing(),
            Pairing::Call("c1")
        );
        assert_eq!(
            item(r#"{"type":"custom_tool_call","call_id":"c2"}"#).pairing(),
            Pairing::Call("c2")
        );
        assert_eq!(
            item(r#"{"type":"function_call_output","call_id":"c1"}"#).pairing(),
            Pairing::Output
        );
        assert_eq!(
            item(r#"{"type":"openai:computer_call_output","call_id":"c3"}"#).pairing(),
            Pairing::Output
        );
        assert_eq!(item(r#"{"type":"function_call"}"#).pairing(), Pairing::None);
        assert_eq!(
            item(r#"{"type":"web_search_call","id":"ws"}"#).pairing(),
            Pairing::None
        );
    }

    #[test]
    fn non_objects_are_not_items() {
        assert!(error("[1]").contains("expected an input item object"));
        assert!(error("\"hi\"").contains("expected an input item object"));
    }
}
