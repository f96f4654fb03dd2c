//! Reading a request body once: `model`, the `input` items, the function tools and whether the
//! request continues stored state, borrowed from the body. Every other member is skipped
//! without being copied.

use std::cell::Cell;
use std::fmt;
use std::ops::Range;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::item::{Item, PushItem};
use super::shape::Shape;
use crate::json;
use crate::json::{member_names, read_once, Field, JsonKind, Text};

/// A request body as the gate reads it.
#[derive(Debug, Default)]
pub struct ParsedRequest<'a> {
    /// `model`, when it is a string.
    pub model: Field<'a>,
    /// `input`.
    pub input: Input<'a>,
    /// `tools`, in request order.
    pub tools: Vec<Tool<'a>>,
    /// `previous_response_id`.
    pub previous_response_id: Field<'a>,
    /// `conversation`: its id as a string ([`Field::Str`]), whether it was written as a string
    /// or as an object's string `id`; any other value only by its kind.
    pub conversation: Field<'a>,
    /// `store`, when it is a boolean: whether the provider is to keep the response.
    pub store: Option<bool>,
    /// The member the items were read from.
    pub at: ItemsAt,
    /// The member names of the items and their content parts (what item profiles check).
    pub shape: super::shape::Shape<'a>,
    /// The body text the request was read from.
    source: Source<'a>,
    /// Where each item lies in the body, when the gate's reader noted it (one range per item).
    item_spans: Option<Vec<std::ops::Range<usize>>>,
    /// How many items at the start of the member were passed over unread ([`parse_after_known`]):
    /// [`items`](Self::items) and the spans begin after them.
    known_items: usize,
}

/// The text a request was read from, kept (a borrow, no copy) so that a rule needing an item's
/// other members can read just that item again. Shown by its length only.
#[derive(Clone, Copy, Default)]
struct Source<'a>(&'a str);

impl fmt::Debug for Source<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

/// Which body member holds the items to gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ItemsAt {
    /// `input`: `/responses`, `/responses/compact`, `/responses/input_tokens`.
    #[default]
    Input,
    /// `items` of a new conversation: `/conversations`.
    Items,
    /// `items` added to a stored conversation: `/conversations/{id}/items`. They continue
    /// stored state, so an output may answer a call that only the conversation holds.
    AddedItems,
}

impl ItemsAt {
    /// The body member that holds the items: `input` or `items`.
    pub fn member(self) -> &'static str {
        match self {
            ItemsAt::Input => "input",
            ItemsAt::Items | ItemsAt::AddedItems => "items",
        }
    }
}

/// The most items one request may carry. No model's context holds more, so a body with more is
/// refused before its items are read into memory.
pub const MAX_ITEMS: usize = 100_000;

impl<'a> ParsedRequest<'a> {
    /// The requested model, when the body names one.
    pub fn model(&self) -> Option<&str> {
        self.model.as_str()
    }

    /// The input items (none for a string or absent `input`).
    pub fn items(&self) -> &[Item<'a>] {
        match &self.input {
            Input::Items(items) => items,
            Input::Absent | Input::Text => &[],
        }
    }

    /// How many items at the start of the member [`parse_after_known`] passed over unread:
    /// [`items`](Self::items) are the ones after them (0 for every other reading).
    pub fn known_items(&self) -> usize {
        self.known_items
    }

    /// The body text the request was read from (empty for a request not read by [`parse`] or
    /// [`parse_with`]).
    pub fn body_text(&self) -> &'a str {
        self.source.0
    }

    /// Where each item lies in [`body_text`](Self::body_text), as the one reading of the body
    /// noted it; `None` when it was read otherwise.
    pub fn item_spans(&self) -> Option<&[std::ops::Range<usize>]> {
        self.item_spans.as_deref()
    }

    /// Whether the request continues state stored by the provider (`previous_response_id`,
    /// `conversation`, an `item_reference` among the items, or items added to a stored
    /// conversation), so calls it answers may live outside the body.
    pub fn continues_stored_state(&self) -> bool {
        self.at == ItemsAt::AddedItems
            || !self.previous_response_id.is_absent_or_null()
            || !self.conversation.is_absent_or_null()
            || self
                .items()
                .iter()
                .any(|item| item.class == super::item::ItemClass::ItemReference)
    }
}

/// The `input` member.
#[derive(Debug, Default)]
pub enum Input<'a> {
    /// Absent or null.
    #[default]
    Absent,
    /// A string: one user message, nothing to gate.
    Text,
    /// An array of items.
    Items(Vec<Item<'a>>),
}

/// One entry of `tools`.
#[derive(Debug, Clone, Default)]
pub struct Tool<'a> {
    /// `type`.
    pub kind: Field<'a>,
    /// `name`.
    pub name: Field<'a>,
    /// `parameters`, its exact JSON text; `None` when absent or null.
    pub parameters: Option<&'a str>,
}

impl Tool<'_> {
    /// Whether this is a function tool (the only kind whose calls are `function_call` items).
    pub fn is_function(&self) -> bool {
        self.kind.as_str() == Some("function")
    }

    /// Whether this is a tool the client runs under a name of its own: a function tool, or a
    /// custom tool (whose calls are `custom_tool_call` items). A team's `tools` globs cover
    /// both.
    pub fn is_named_client_tool(&self) -> bool {
        matches!(self.kind.as_str(), Some("function" | "custom"))
    }
}

/// Why a body could not be read or judged as a request (a 400, docs/answers.md).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The body is not a JSON object.
    #[error("the request body is not valid JSON: {message}")]
    InvalidJson {
        /// What the JSON reader said.
        message: String,
    },
    /// The body is JSON, but `input` (or a member the gate reads) has the wrong type.
    #[error("{param}: {message}")]
    InvalidInput {
        /// Where, e.g. `input[3]`.
        param: String,
        /// What is wrong.
        message: String,
    },
    /// Checking the tool calls would take more work than the policy allows one request.
    #[error(transparent)]
    TooCostly(#[from] WorkExceeded),
}

/// Judging a request would take more schema work than its budget (see
/// [`crate::gate::Policy::work_budget`]). The work is counted, not timed; only the memory of
/// passed calls (a remembered pass skips validation) can make a warm process accept a body
/// that a cold one refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "checking this request's tool calls against their schemas would take more than the gate's \
     work budget of {budget} units; send fewer new calls per request or simpler schemas"
)]
pub struct WorkExceeded {
    /// The budget that was exceeded.
    pub budget: u64,
}

impl BodyError {
    /// The error code (docs/answers.md): `invalid_json`, `invalid_input` or `gate_budget_exceeded`.
    pub fn code(&self) -> &'static str {
        match self {
            BodyError::InvalidJson { .. } => "invalid_json",
            BodyError::InvalidInput { .. } => "invalid_input",
            BodyError::TooCostly(_) => "gate_budget_exceeded",
        }
    }

    /// The request parameter at fault, if known.
    pub fn param(&self) -> Option<&str> {
        match self {
            BodyError::InvalidJson { .. } | BodyError::TooCostly(_) => None,
            BodyError::InvalidInput { param, .. } => Some(param),
        }
    }
}

/// Where the reader is, so a type error can name its parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Body,
    /// A top-level member the gate reads, by name.
    Member(&'static str),
    Input(ItemsAt),
    InputItem(ItemsAt, usize),
    /// A member of an item: a repeated or re-cased member the gate reads.
    InputMember(ItemsAt, usize, &'static str),
    Tools,
    Tool(usize),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Body => f.write_str("body"),
            Place::Member(name) => f.write_str(name),
            Place::Input(at) => f.write_str(at.member()),
            Place::InputItem(at, i) => write!(f, "{}[{i}]", at.member()),
            Place::InputMember(at, i, member) => write!(f, "{}[{i}].{member}", at.member()),
            Place::Tools => f.write_str("tools"),
            Place::Tool(i) => write!(f, "tools[{i}]"),
        }
    }
}

/// Reads `body` as a Responses request (items in `input`). The body is scanned once; strings
/// without escapes are borrowed.
pub fn parse(body: &[u8]) -> Result<ParsedRequest<'_>, BodyError> {
    parse_with(body, ItemsAt::Input)
}

/// Reads `body` as a request whose items are in the member `at` names.
///
/// JSON must be UTF-8, and members the gate skips are not otherwise checked for it, so the
/// whole body is validated first (which also lets the reader skip its own per-string checks).
pub fn parse_with(body: &[u8], at: ItemsAt) -> Result<ParsedRequest<'_>, BodyError> {
    parse_inner(body, at, false)
}

/// [`parse_with`], also noting where each item lies in the body
/// ([`ParsedRequest::item_spans`]), for the ledger's `item_tampered`, which digests a
/// replayed item's whole text: a few instructions an item that [`parse_with`] does not spend.
pub fn parse_noting_spans(body: &[u8], at: ItemsAt) -> Result<ParsedRequest<'_>, BodyError> {
    parse_inner(body, at, true)
}

/// Items at the start of the body's `input` array that the caller has judged before, byte for
/// byte, and that [`parse_after_known`] passes over unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownItems {
    /// Where the array opens (its `[`).
    pub open: usize,
    /// Just after the last item passed over.
    pub resume: usize,
    /// How many items that is.
    pub count: usize,
}

/// [`parse_with`] (noting spans when `note_spans`), passing over the items `known` names
/// unread: the request's [`items`](ParsedRequest::items) are the ones after them, and
/// [`ParsedRequest::known_items`] says how many were passed over (0 when the body's items
/// array was not where `known` says, and all were read). The caller must know that text to be
/// whole items, as the gate read them before.
pub fn parse_after_known(
    body: &[u8],
    at: ItemsAt,
    note_spans: bool,
    known: KnownItems,
) -> Result<ParsedRequest<'_>, BodyError> {
    parse_reading(body, at, note_spans, Some(known))
}

fn parse_inner(body: &[u8], at: ItemsAt, note_spans: bool) -> Result<ParsedRequest<'_>, BodyError> {
    parse_reading(body, at, note_spans, None)
}

fn parse_reading(
    body: &[u8],
    at: ItemsAt,
    note_spans: bool,
    known: Option<KnownItems>,
) -> Result<ParsedRequest<'_>, BodyError> {
    // The SIMD check is several times faster on large bodies; the standard library's finds the
    // offset of the bad byte for the message.
    let text = match simdutf8::basic::from_utf8(body) {
        Ok(text) => text,
        Err(_) => {
            let offset = std::str::from_utf8(body).map_or_else(|e| e.valid_up_to(), |_| body.len());
            return Err(BodyError::InvalidJson {
                message: format!("the body is not UTF-8 (invalid byte at offset {offset})"),
            });
        }
    };
    let place = Cell::new(Place::Body);
    let mut reader = json::Reader::new(text);
    // Room for the items to read: after the known ones, only the rest of the body's.
    let unread = body.len() - known.map_or(0, |known| known.resume.min(body.len()));
    let expected_items = (unread / BODY_BYTES_PER_ITEM).clamp(16, MAX_PRESIZED_ITEMS);
    if note_spans {
        reader.reserve_spans(expected_items);
    }
    if let Some(known) = known {
        reader.resume_array(known.open, known.resume);
    }
    let parsed = RequestSeed {
        place: &place,
        expected_items,
        at,
        note_spans,
        after_known: known.is_some(),
    }
    .deserialize(&mut reader)
    .and_then(|request| reader.end().map(|()| request));
    let mut request = parsed.map_err(|e| body_error(e.category(), e.to_string(), place.get()))?;
    request.source = Source(text);
    if let Some(known) = known.filter(|_| reader.resumed()) {
        request.known_items = known.count;
    }
    if note_spans {
        let spans = reader.take_spans();
        request.item_spans = (spans.len() == request.items().len()).then_some(spans);
    }
    Ok(request)
}

/// [`parse_with`] on serde_json's reader instead of the gate's own: the reference the
/// differential tests and the `json_reader` fuzz target hold [`json::Reader`] to.
#[doc(hidden)]
pub fn parse_with_serde_json(body: &[u8], at: ItemsAt) -> Result<ParsedRequest<'_>, BodyError> {
    let text = std::str::from_utf8(body).map_err(|_| BodyError::InvalidJson {
        message: "the body is not UTF-8".into(),
    })?;
    let place = Cell::new(Place::Body);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = RequestSeed {
        place: &place,
        expected_items: 16,
        at,
        note_spans: false,
        after_known: false,
    }
    .deserialize(&mut de)
    .and_then(|request| de.end().map(|()| request));
    let mut request = parsed.map_err(|e| body_error(category_of(&e), e.to_string(), place.get()))?;
    request.source = Source(text);
    Ok(request)
}

/// Whether `ours` (from [`parse`]) and `reference` (from [`parse_with_serde_json`]) refuse a
/// body the same way: the same code at the same parameter, with one difference by design. The
/// reference takes a part list (`content`, `output`, `summary`) as written, which only skips
/// it, and reads it again on its own, where any error is the item's. So what only reading a
/// part's text finds (a member name with a surrogate escape missing its pair, a number out of
/// range where a part should be) the reference refuses at the item (`invalid_input`), and the
/// gate's reader, which reads the list where it stands, as the body's JSON (`invalid_json`),
/// with the same reader message but for its position.
#[doc(hidden)]
pub fn same_refusal(ours: &BodyError, reference: &BodyError) -> bool {
    if (ours.code(), ours.param()) == (reference.code(), reference.param()) {
        return true;
    }
    let (BodyError::InvalidJson { message: ours }, BodyError::InvalidInput { message: theirs, .. }) =
        (ours, reference)
    else {
        return false;
    };
    let unplaced = |message: &str| message.split(" at line ").next().unwrap_or_default().to_owned();
    ours.contains(" at line ") && unplaced(ours) == unplaced(theirs)
}

fn category_of(e: &serde_json::Error) -> json::Category {
    match e.classify() {
        serde_json::error::Category::Data => json::Category::Data,
        serde_json::error::Category::Eof => json::Category::Eof,
        serde_json::error::Category::Io | serde_json::error::Category::Syntax => json::Category::Syntax,
    }
}

/// Reads a request's `tools` array on its own, from its JSON text (`null` reads as no tools):
/// the response side checks a provider's calls against the tools the request declared.
pub fn parse_tools(tools_json: &str) -> Result<Vec<Tool<'_>>, BodyError> {
    let place = Cell::new(Place::Tools);
    let mut reader = json::Reader::new(tools_json);
    let parsed = ToolsSeed { place: &place }
        .deserialize(&mut reader)
        .and_then(|tools| reader.end().map(|()| tools));
    parsed.map_err(|e| body_error(e.category(), e.to_string(), place.get()))
}

/// A request's tools, owned: what the response side keeps of them to check the calls the
/// answer produces, without a second pass over the body. Their texts (types, names, parameter
/// schemas) are copied into one buffer, so keeping them costs two allocations however many
/// tools the request declares.
#[derive(Debug, Clone, Default)]
pub struct DeclaredTools {
    /// Every kept text, one after another.
    text: String,
    tools: Vec<DeclaredTool>,
}

#[derive(Debug, Clone)]
struct DeclaredTool {
    kind: KeptField,
    name: KeptField,
    /// Where the `parameters` text lies in the buffer.
    parameters: Option<Range<usize>>,
}

/// A [`Field`] whose string lies in the buffer of [`DeclaredTools`].
#[derive(Debug, Clone)]
enum KeptField {
    Absent,
    Str(Range<usize>),
    Other(JsonKind),
}

/// Appends `part` to `text`; where it lies there.
fn keep(part: &str, text: &mut String) -> Range<usize> {
    let start = text.len();
    text.push_str(part);
    start..text.len()
}

impl KeptField {
    /// `field`, its string appended to `text`.
    fn of(field: &Field<'_>, text: &mut String) -> KeptField {
        match field {
            Field::Absent => KeptField::Absent,
            Field::Str(part) => KeptField::Str(keep(part, text)),
            Field::Other(kind) => KeptField::Other(*kind),
        }
    }
}

impl DeclaredTools {
    /// The owned form of `tools`, as [`parse`] read them.
    pub fn of(tools: &[Tool<'_>]) -> DeclaredTools {
        let field_len = |field: &Field<'_>| field.as_str().map_or(0, str::len);
        let len = tools
            .iter()
            .map(|tool| field_len(&tool.kind) + field_len(&tool.name) + tool.parameters.map_or(0, str::len))
            .sum();
        let mut text = String::with_capacity(len);
        let tools = tools
            .iter()
            .map(|tool| DeclaredTool {
                kind: KeptField::of(&tool.kind, &mut text),
                name: KeptField::of(&tool.name, &mut text),
                parameters: tool.parameters.map(|part| keep(part, &mut text)),
            })
            .collect();
        DeclaredTools { text, tools }
    }

    /// The tools, as the gate's rules read them.
    pub fn tools(&self) -> Vec<Tool<'_>> {
        let field = |kept: &KeptField| match kept {
            KeptField::Absent => Field::Absent,
            KeptField::Str(range) => Field::Str(Text::Borrowed(&self.text[range.clone()])),
            KeptField::Other(kind) => Field::Other(*kind),
        };
        self.tools
            .iter()
            .map(|tool| Tool {
                kind: field(&tool.kind),
                name: field(&tool.name),
                parameters: tool.parameters.clone().map(|range| &self.text[range]),
            })
            .collect()
    }

    /// Whether the request declared no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

fn body_error(category: json::Category, message: String, place: Place) -> BodyError {
    match (category, place) {
        (json::Category::Data, Place::Body) => BodyError::InvalidJson {
            message: "the request body must be a JSON object".into(),
        },
        (json::Category::Data, place) => BodyError::InvalidInput {
            param: place.to_string(),
            message,
        },
        (json::Category::Syntax | json::Category::Eof, _) => BodyError::InvalidJson { message },
    }
}

member_names! {
    /// Top-level member names, matched without allocating.
    Key {
        Model = "model",
        Input = "input",
        Items = "items",
        Tools = "tools",
        PreviousResponseId = "previous_response_id",
        Conversation = "conversation",
        Store = "store",
    }
}

/// A member read as a boolean when it is one; any other value is passed over (`None`).
struct Flag(Option<bool>);

impl<'de> serde::Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FlagVisitor;
        impl<'de> Visitor<'de> for FlagVisitor {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(Some(v)))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_unit<E>(self) -> Result<Flag, E> {
                Ok(Flag(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Flag, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Flag(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Flag, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Flag(None))
            }
        }
        deserializer.deserialize_any(FlagVisitor)
    }
}

/// A guess at the body bytes per `input` item, low for agent histories (whose items are mostly
/// a few hundred bytes or more), used to size the item list once instead of growing it.
const BODY_BYTES_PER_ITEM: usize = 256;

/// The most items the list is sized for up front; a longer list grows as usual.
const MAX_PRESIZED_ITEMS: usize = 16 * 1024;

struct RequestSeed<'p> {
    place: &'p Cell<Place>,
    /// How many items to make room for at once.
    expected_items: usize,
    /// Which member holds the items.
    at: ItemsAt,
    /// Whether to note where each item lies ([`json::Spanned`]).
    note_spans: bool,
    /// Whether the items array is read after the items the reader was told to pass over.
    after_known: bool,
}

impl<'de> DeserializeSeed<'de> for RequestSeed<'_> {
    type Value = ParsedRequest<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RequestSeed<'_> {
    type Value = ParsedRequest<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut model = None;
        let mut input = None;
        let mut tools = None;
        let mut previous_response_id = None;
        let mut conversation: Option<super::conversation::ConversationRef<'_>> = None;
        let mut store = None;
        let mut shape = Shape::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Input if self.at == ItemsAt::Input => {
                    self.read_items(&mut map, &mut input, &mut shape)?
                }
                Key::Items if self.at != ItemsAt::Input => {
                    self.read_items(&mut map, &mut input, &mut shape)?
                }
                Key::Model => {
                    self.place.set(Place::Member("model"));
                    read_once(&mut map, &mut model, "model")?;
                }
                Key::Tools => {
                    self.place.set(Place::Member("tools"));
                    if tools.is_some() {
                        return Err(de::Error::custom("duplicate member `tools`"));
                    }
                    tools = Some(map.next_value_seed(ToolsSeed { place: self.place })?);
                }
                Key::PreviousResponseId => {
                    self.place.set(Place::Member("previous_response_id"));
                    read_once(&mut map, &mut previous_response_id, "previous_response_id")?;
                }
                Key::Conversation => {
                    self.place.set(Place::Member("conversation"));
                    if conversation.is_some() {
                        return Err(de::Error::custom("duplicate member `conversation`"));
                    }
                    // What the object's reading refuses is its `id` (a repeated or re-cased one).
                    self.place.set(Place::Member("conversation.id"));
                    conversation = Some(map.next_value()?);
                }
                Key::Store => {
                    self.place.set(Place::Member("store"));
                    read_once(&mut map, &mut store, "store")?;
                }
                Key::Misspelled(name) => {
                    self.place.set(Place::Member(name.gated));
                    return Err(name.into_error());
                }
                Key::Input | Key::Items | Key::Other => {
                    self.place.set(Place::Body);
                    map.next_value::<IgnoredAny>()?;
                }
            }
            self.place.set(Place::Body);
        }
        Ok(ParsedRequest {
            model: model.unwrap_or_default(),
            input: input.unwrap_or_default(),
            tools: tools.unwrap_or_default(),
            previous_response_id: previous_response_id.unwrap_or_default(),
            conversation: conversation
                .map(|conversation| conversation.0)
                .unwrap_or_default(),
            store: store.and_then(|flag: Flag| flag.0),
            at: self.at,
            shape,
            source: Source::default(),
            item_spans: None,
            known_items: 0,
        })
    }
}

impl RequestSeed<'_> {
    /// Reads the member holding the items, once.
    fn read_items<'de, A: MapAccess<'de>>(
        &self,
        map: &mut A,
        input: &mut Option<Input<'de>>,
        shape: &mut Shape<'de>,
    ) -> Result<(), A::Error> {
        self.place.set(Place::Input(self.at));
        if input.is_some() {
            return Err(de::Error::custom(format_args!(
                "duplicate member `{}`",
                self.at.member()
            )));
        }
        *input = Some(map.next_value_seed(InputSeed {
            place: self.place,
            expected_items: self.expected_items,
            at: self.at,
            note_spans: self.note_spans,
            after_known: self.after_known,
            shape,
        })?);
        Ok(())
    }
}

struct InputSeed<'p, 'de> {
    place: &'p Cell<Place>,
    expected_items: usize,
    at: ItemsAt,
    note_spans: bool,
    /// Read through [`json::array_after_known`]: the reader may pass over leading items.
    after_known: bool,
    shape: &'p mut Shape<'de>,
}

impl<'de> DeserializeSeed<'de> for InputSeed<'_, 'de> {
    type Value = Input<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        match self.after_known {
            true => json::array_after_known(deserializer, self),
            false => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for InputSeed<'_, 'de> {
    type Value = Input<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of input items")
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Input::Text)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Input::Absent)
    }

    /// [`json::array_after_known`] hands over any value it does not read from a resume point.
    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        InputSeed {
            after_known: false,
            ..self
        }
        .deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(self.expected_items));
        self.shape.item_members.reserve(items.capacity() * 4);
        loop {
            self.place.set(Place::InputItem(self.at, items.len()));
            let fault = Cell::new(None);
            let item = PushItem {
                items: &mut items,
                shape: &mut *self.shape,
                fault: &fault,
            };
            // With `note_spans`, each item's place in the body is noted as it is read.
            let read = match self.note_spans {
                true => seq.next_element_seed(json::Spanned(item)),
                false => seq.next_element_seed(item),
            };
            let read = read.inspect_err(|_| {
                if let Some(member) = fault.get() {
                    self.place.set(Place::InputMember(self.at, items.len(), member));
                }
            })?;
            if read.is_none() {
                break;
            }
            if items.len() > MAX_ITEMS {
                self.place.set(Place::Input(self.at));
                return Err(de::Error::custom(format_args!(
                    "more than {MAX_ITEMS} items; no model's context holds that many"
                )));
            }
        }
        self.place.set(Place::Input(self.at));
        Ok(Input::Items(items))
    }
}

struct ToolsSeed<'p> {
    place: &'p Cell<Place>,
}

impl<'de> DeserializeSeed<'de> for ToolsSeed<'_> {
    type Value = Vec<Tool<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ToolsSeed<'_> {
    type Value = Vec<Tool<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of tools")
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut tools = Vec::new();
        loop {
            self.place.set(Place::Tool(tools.len()));
            match seq.next_element_seed(ToolSeed)? {
                Some(tool) => tools.push(tool),
                None => break,
            }
        }
        self.place.set(Place::Tools);
        Ok(tools)
    }
}

struct ToolSeed;

member_names! {
    /// Tool member names, matched without allocating.
    ToolKey {
        Type = "type",
        Name = "name",
        Parameters = "parameters",
    }
}

impl<'de> DeserializeSeed<'de> for ToolSeed {
    type Value = Tool<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ToolSeed {
    type Value = Tool<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tool object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut kind = None;
        let mut name = None;
        let mut parameters: Option<Option<&'de str>> = None;
        while let Some(key) = map.next_key::<ToolKey>()? {
            match key {
                ToolKey::Type => read_once(&mut map, &mut kind, "type")?,
                ToolKey::Name => read_once(&mut map, &mut name, "name")?,
                ToolKey::Parameters => {
                    if parameters.is_some() {
                        return Err(de::Error::custom("duplicate member `parameters`"));
                    }
                    let raw: &'de RawValue = map.next_value()?;
                    parameters = Some((raw.get() != "null").then_some(raw.get()));
                }
                ToolKey::Misspelled(name) => return Err(name.into_error()),
                ToolKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Tool {
            kind: kind.unwrap_or_default(),
            name: name.unwrap_or_default(),
            parameters: parameters.flatten(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_tools_read_as_the_tools_parsed() {
        let body = br#"{"tools":[{"type":"function","name":"f\u00e9\"q","parameters":{"type":"object","properties":{"a":{"type":"string"}}},"strict":true},
            {"type":"web_search"},{"type":"custom","name":"c","parameters":null},{"type":7,"name":["x"]}]}"#;
        let request = parse(body).unwrap();
        let declared = DeclaredTools::of(&request.tools);
        drop(request);
        let again = declared.tools();
        let request = parse(body).unwrap();
        assert_eq!(again.len(), request.tools.len());
        for (a, b) in request.tools.iter().zip(&again) {
            assert_eq!(a.kind, b.kind);
            assert_eq!(a.name, b.name);
            assert_eq!(a.parameters, b.parameters);
        }
        assert_eq!(again[0].name.as_str(), Some("f\u{e9}\"q"));
        assert_eq!(again[3].kind, Field::Other(crate::gate::JsonKind::Number));
        assert!(DeclaredTools::of(&[]).is_empty());
        assert!(!declared.is_empty());
    }

    #[test]
    fn a_million_open_brackets_anywhere_are_a_clean_refusal() {
        let deep = "[".repeat(1_000_000);
        for body in [
            deep.clone(),
            format!(r#"{{"input":{deep}"#),
            format!(r#"{{"input":[{{"role":"user","content":{deep}"#),
            format!(r#"{{"metadata":{deep}"#),
            format!(r#"{{"input":[{{"type":"function_call","call_id":"c","arguments":{deep}"#),
            format!(r#"{{"tools":[{{"type":"function","name":"f","parameters":{deep}"#),
        ] {
            // Not JSON (the text ends inside), or an array where an item must be an object.
            let error = parse(body.as_bytes()).unwrap_err();
            assert!(
                ["invalid_json", "invalid_input"].contains(&error.code()),
                "{error}"
            );
        }
        // Closed again, in a member the gate skips: valid JSON, read without a deep stack.
        let closed = format!(
            r#"{{"metadata":{}{},"input":[]}}"#,
            "[".repeat(1_000_000),
            "]".repeat(1_000_000)
        );
        assert!(parse(closed.as_bytes()).is_ok());
    }

    #[test]
    fn reads_model_items_and_tools() {
        let body = br#"{"model":"gpt-5","stream":true,"input":[{"role":"user","content":"hi"},{"type":"function_call","name":"f","call_id":"c","arguments":"{}"}],
            "tools":[{"type":"function","name":"f","parameters":{"type":"object"}},{"type":"web_search"}]}"#;
        let req = parse(body).unwrap();
        assert_eq!(req.model(), Some("gpt-5"));
        assert_eq!(req.items().len(), 2);
        assert_eq!(req.tools.len(), 2);
        assert_eq!(req.tools[0].parameters.unwrap(), r#"{"type":"object"}"#);
        assert!(req.tools[0].is_function() && !req.tools[1].is_function());
    }

    #[test]
    fn keeps_the_body_text_and_shows_only_its_length() {
        let body = br#"{"model":"m","input":[{"type":"reasoning","encrypted_content":"gAAA"}]}"#;
        let req = parse(body).unwrap();
        assert_eq!(req.body_text().as_bytes(), body);
        let shown = format!("{req:?}");
        assert!(
            !shown.contains("gAAA") && shown.contains(&format!("<{} bytes>", body.len())),
            "{shown}"
        );
        assert_eq!(ParsedRequest::default().body_text(), "");
    }

    #[test]
    fn string_and_null_input_have_no_items() {
        assert!(matches!(
            parse(br#"{"input":"hello"}"#).unwrap().input,
            Input::Text
        ));
        assert!(matches!(
            parse(br#"{"input":null}"#).unwrap().input,
            Input::Absent
        ));
        assert!(matches!(parse(br#"{"model":"m"}"#).unwrap().input, Input::Absent));
    }

    #[test]
    fn null_parameters_count_as_absent() {
        let req = parse(br#"{"tools":[{"type":"function","name":"f","parameters":null}]}"#).unwrap();
        assert!(req.tools[0].parameters.is_none());
    }

    #[test]
    fn broken_json_is_invalid_json() {
        for body in [
            &b"{"[..],
            b"not json",
            b"{\"input\":[}",
            b"{} x",
            b"",
            b"{\"a\":\"\xff\"}",
        ] {
            let err = parse(body).unwrap_err();
            assert_eq!(err.code(), "invalid_json", "{body:?}: {err}");
        }
    }

    #[test]
    fn a_body_that_is_not_an_object_is_invalid_json() {
        for body in [&b"[]"[..], b"\"input\"", b"42", b"null"] {
            assert_eq!(parse(body).unwrap_err().code(), "invalid_json");
        }
    }

    #[test]
    fn wrong_input_type_names_the_parameter() {
        let err = parse(br#"{"input":42}"#).unwrap_err();
        assert_eq!((err.code(), err.param()), ("invalid_input", Some("input")));
        let err = parse(br#"{"input":{"role":"user"}}"#).unwrap_err();
        assert_eq!(err.param(), Some("input"));
    }

    #[test]
    fn a_bad_item_names_its_index() {
        let err = parse(br#"{"input":[{"role":"user","content":"a"},7]}"#).unwrap_err();
        assert_eq!((err.code(), err.param()), ("invalid_input", Some("input[1]")));
        let err = parse(br#"{"input":[{"role":"user","content":"a"},{"id":1}]}"#).unwrap_err();
        assert_eq!(err.param(), Some("input[1]"));
    }

    #[test]
    fn a_bad_tool_names_its_index() {
        let err = parse(br#"{"tools":[{"type":"function"},"x"]}"#).unwrap_err();
        assert_eq!((err.code(), err.param()), ("invalid_input", Some("tools[1]")));
        let err = parse(br#"{"tools":{}}"#).unwrap_err();
        assert_eq!(err.param(), Some("tools"));
    }

    #[test]
    fn repeated_gated_members_are_refused() {
        let err = parse(br#"{"input":[],"input":[{"type":"x:y"}]}"#).unwrap_err();
        assert_eq!((err.code(), err.param()), ("invalid_input", Some("input")));
        let err = parse(br#"{"model":"a","model":"b"}"#).unwrap_err();
        assert_eq!(err.param(), Some("model"));
    }

    #[test]
    fn store_is_read_when_it_is_a_boolean_once_and_as_written() {
        let store = |body: &[u8]| parse(body).unwrap().store;
        assert_eq!(store(br#"{"store":false,"input":[]}"#), Some(false));
        assert_eq!(store(br#"{"input":[],"store":true}"#), Some(true));
        assert_eq!(store(br#"{"input":[]}"#), None);
        for other in [
            &br#"{"store":null}"#[..],
            br#"{"store":"false"}"#,
            br#"{"store":[false]}"#,
            br#"{"store":{"a":0}}"#,
            br#"{"store":0}"#,
        ] {
            assert_eq!(store(other), None);
        }
        for body in [
            &br#"{"store":true,"store":false}"#[..],
            br#"{"Store":false,"store":true}"#,
        ] {
            let err = parse(body).unwrap_err();
            assert_eq!(
                (err.code(), err.param()),
                ("invalid_input", Some("store")),
                "{err}"
            );
        }
    }

    #[test]
    fn names_that_read_as_gated_members_are_refused_where_the_gate_reads() {
        for (body, param) in [
            (&br#"{"INPUT":[{"type":"x:y"}],"input":[]}"#[..], "input"),
            (br#"{"Input":"hi"}"#, "input"),
            (br#"{"model":"m","Model":"n"}"#, "model"),
            (br#"{"previous_Response_id":"resp_1"}"#, "previous_response_id"),
            (
                br#"{"input":[{"role":"user","content":"a"},{"Type":"x:y","role":"user","content":"b"}]}"#,
                "input[1].type",
            ),
            (br#"{"tools":[{"type":"function","Name":"f"}]}"#, "tools[0]"),
            (br#"{"tools":[{"type\u0000":"function","name":"f"}]}"#, "tools[0]"),
        ] {
            let err = parse(body).unwrap_err();
            assert_eq!((err.code(), err.param()), ("invalid_input", Some(param)), "{err}");
        }
    }

    #[test]
    fn an_id_is_read_once_wherever_the_gate_reads_one() {
        for (body, param) in [
            (&br#"{"conversation":{"id":"conv_b","id":"conv_a"}}"#[..], "conversation.id"),
            (br#"{"conversation":{"id":"conv_b","ID":"conv_a"}}"#, "conversation.id"),
            (br#"{"conversation":{"Id":"conv_a","id":"conv_b"}}"#, "conversation.id"),
            (br#"{"conversation":{"id":"conv_b","id":"conv_a"}}"#, "conversation.id"),
            (br#"{"conversation":{"id":"a","id":"b","id":"c"}}"#, "conversation.id"),
            (br#"{"conversation":"conv_a","conversation":"conv_b"}"#, "conversation"),
            (br#"{"previous_response_id":"resp_b","previous_response_id":"resp_a"}"#, "previous_response_id"),
            (br#"{"previous_response_id":"resp_b","previous_response_id":"resp_a"}"#, "previous_response_id"),
            (br#"{"input":[{"type":"item_reference","id":"a","id":"b"}]}"#, "input[0].id"),
            (br#"{"input":[{"id":"a","ID":"b"}]}"#, "input[0].id"),
            (br#"{"input":[{"type":"item_reference","id":"a","id":"b"}]}"#, "input[0].id"),
            (
                br#"{"input":[{"type":"reasoning","summary":[],"encrypted_content":"a","Encrypted_Content":"b"}]}"#,
                "input[0].encrypted_content",
            ),
            (
                br#"{"input":[{"role":"user","content":"a"},{"type":"reasoning","id":"r","id":null,"summary":[]}]}"#,
                "input[1].id",
            ),
        ] {
            let err = parse(body).unwrap_err();
            assert_eq!((err.code(), err.param()), ("invalid_input", Some(param)), "{err}");
        }
        // One `id`, spelt with escapes, is `id`; other members of the object are not read.
        let request = parse(br#"{"conversation":{"id":"conv_a","Topic":"x","topic":"y"}}"#).unwrap();
        assert_eq!(request.conversation.as_str(), Some("conv_a"));
        for other in [
            &br#"{"conversation":["conv_a"]}"#[..],
            br#"{"conversation":{"id":null}}"#,
        ] {
            let request = parse(other).unwrap();
            assert!(request.conversation.as_str().is_none());
        }
    }

    #[test]
    fn names_the_gate_does_not_read_keep_any_spelling() {
        let body = br#"{"Stream":true,"METADATA":{"Input":1,"type":2},"text":{"Format":{"Type":"json"}},
            "tools":[{"type":"function","name":"f","parameters":{"properties":{"Type":{"type":"string"}}}}],
            "input":[{"role":"user","content":[{"type":"input_text","Text":"hi","Type":"x"}]}]}"#;
        let req = parse(body).unwrap();
        assert_eq!(req.items().len(), 1);
    }

    #[test]
    fn stored_state_is_continued_by_previous_response_conversation_or_reference() {
        let continues = |body: &[u8]| parse(body).unwrap().continues_stored_state();
        assert!(continues(br#"{"previous_response_id":"resp_1","input":[]}"#));
        assert!(continues(br#"{"conversation":{"id":"conv_1"},"input":[]}"#));
        assert!(continues(br#"{"conversation":"conv_1"}"#));
        assert!(continues(br#"{"input":[{"type":"item_reference","id":"fc_1"}]}"#));
        assert!(continues(br#"{"input":[{"id":"msg_1"}]}"#));
        assert!(!continues(
            br#"{"previous_response_id":null,"input":[{"role":"user","content":"a"}]}"#
        ));
        // Items added to a stored conversation continue it; a new conversation's items do not.
        let output = br#"{"items":[{"type":"function_call_output","call_id":"c","output":"x"}]}"#;
        assert!(parse_with(output, ItemsAt::AddedItems)
            .unwrap()
            .continues_stored_state());
        assert!(!parse_with(output, ItemsAt::Items)
            .unwrap()
            .continues_stored_state());
    }

    #[test]
    fn conversation_bodies_carry_their_items_in_items() {
        let body = br#"{"items":[{"type":"openai:web_search_call"},{"role":"user","content":"a"}],"input":[{"x":1}]}"#;
        let req = parse_with(body, ItemsAt::Items).unwrap();
        assert_eq!(req.items().len(), 2);
        let err = parse_with(br#"{"items":[{"role":"user","content":"a"},7]}"#, ItemsAt::Items).unwrap_err();
        assert_eq!(err.param(), Some("items[1]"));
    }

    #[test]
    fn too_many_items_are_refused_while_reading() {
        let mut body = String::from(r#"{"input":["#);
        for i in 0..=MAX_ITEMS {
            if i > 0 {
                body.push(',');
            }
            body.push_str(r#"{"id":"a"}"#);
        }
        body.push_str("]}");
        let err = parse(body.as_bytes()).unwrap_err();
        assert_eq!((err.code(), err.param()), ("invalid_input", Some("input")));
        assert!(err.to_string().contains("more than"), "{err}");
    }

    #[test]
    fn syntax_errors_inside_items_stay_invalid_json() {
        let err = parse(br#"{"input":[{"role":"user","content":"a}]}"#).unwrap_err();
        assert_eq!(err.code(), "invalid_json");
    }

    #[test]
    fn an_undecodable_part_member_name_is_the_bodys_json_and_the_same_refusal_as_the_reference() {
        // A surrogate escape without its pair in a content part's member name: skipping passes
        // it, decoding a name refuses it (found by the json_reader fuzz target).
        for name in [r"annotation\ud800s", r"\udc00", r"x\ud800\u0041"] {
            let body = format!(
                r#"{{"input":[{{"type":"message","role":"assistant","content":[{{"{name}":[],"type":"output_text","text":"done"}}]}}]}}"#
            );
            let ours = parse(body.as_bytes()).unwrap_err();
            assert_eq!(
                (ours.code(), ours.param()),
                ("invalid_json", None),
                "{name}: {ours}"
            );
            let reference = parse_with_serde_json(body.as_bytes(), ItemsAt::Input).unwrap_err();
            assert_eq!(
                (reference.code(), reference.param()),
                ("invalid_input", Some("input[0]"))
            );
            assert!(same_refusal(&ours, &reference), "{name}: {ours} / {reference}");
        }
    }

    #[test]
    fn a_number_out_of_range_as_a_part_is_the_same_refusal_as_the_reference() {
        let body = br#"{"input":[{"type":"message","role":"user","content":[1e999]}]}"#;
        let ours = parse(body).unwrap_err();
        let reference = parse_with_serde_json(body, ItemsAt::Input).unwrap_err();
        assert_eq!(ours.code(), "invalid_json", "{ours}");
        assert!(same_refusal(&ours, &reference), "{ours} / {reference}");
    }

    #[test]
    fn other_differences_are_not_the_same_refusal() {
        let invalid_json = |message: &str| BodyError::InvalidJson {
            message: message.into(),
        };
        let invalid_input = |param: &str, message: &str| BodyError::InvalidInput {
            param: param.into(),
            message: message.into(),
        };
        let escape = "unexpected end of hex escape at line 1 column 9";
        assert!(same_refusal(
            &invalid_json(escape),
            &invalid_json("EOF at line 1 column 2")
        ));
        assert!(same_refusal(
            &invalid_input("input[1]", "a"),
            &invalid_input("input[1]", "b")
        ));
        assert!(!same_refusal(
            &invalid_input("input[1]", "a"),
            &invalid_input("input[2]", "a")
        ));
        assert!(!same_refusal(
            &invalid_input("input[0]", escape),
            &invalid_json(escape)
        ));
        assert!(!same_refusal(
            &invalid_json(escape),
            &invalid_input(
                "input[0]",
                "lone leading surrogate in hex escape at line 1 column 3"
            )
        ));
    }

    #[test]
    fn deep_nesting_is_refused_without_overflow() {
        let mut body = String::from(r#"{"input":[{"role":"user","content":"#);
        body.push_str(&"[".repeat(100_000));
        let err = parse(body.as_bytes()).unwrap_err();
        assert_eq!(err.code(), "invalid_json");
    }
}
