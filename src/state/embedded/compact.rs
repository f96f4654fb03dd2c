//! The compact binary form a record is handed over in (docs/operations.md#state-backends): what
//! the request thread builds in one buffer, and what the pending ring and the recent index hold
//! and read back. Texts are length-prefixed, numbers and digests fixed-width, little-endian;
//! nothing is escaped or searched for, so building it is a few copies into one allocation.
//!
//! It lives only in this process's memory: the tree keeps its own stored form.

use std::borrow::Cow;

use crate::ledger::{CallIds, ItemRecord, Owner, StoredContent, StoredResponse};

/// The first byte of every encoding (a change of layout changes it).
const VERSION: u8 = 1;

/// The item types answers are made of, read back without an allocation of their own.
const KNOWN_TYPES: [&str; 4] = ["function_call", "message", "reasoning", "compaction"];

/// A record's encoding that does not read back (a bug, never data from outside).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a compact record does not read: {0}")]
pub(crate) struct Unreadable(&'static str);

/// `response` in the compact form.
pub(crate) fn encode(response: &StoredResponse) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(response));
    out.push(VERSION);
    put_str(&mut out, &response.id);
    put_str(&mut out, &response.owner.provider);
    put_opt(&mut out, response.owner.model.as_deref());
    put_opt(&mut out, response.team.as_deref());
    out.extend_from_slice(&response.created_unix.to_le_bytes());
    out.extend_from_slice(&response.expires_unix.to_le_bytes());
    put_opt(&mut out, response.previous_response_id.as_deref());
    out.push(u8::from(response.owner_only));
    put_len(&mut out, response.items.len());
    for item in &response.items {
        put_opt(&mut out, item.id.as_deref());
        put_str(&mut out, &item.item_type);
        put_opt(&mut out, item.call_id.as_deref());
        out.extend_from_slice(&item.digest);
        out.push(u8::from(item.has_encrypted_content));
        put_opt(&mut out, item.preceded_by.as_deref());
    }
    put_len(&mut out, response.input_call_ids.len());
    response
        .input_call_ids
        .iter()
        .for_each(|id| put_str(&mut out, id));
    match &response.content {
        None => out.push(0),
        Some(content) => {
            out.push(1);
            put_strs(&mut out, &content.input);
            put_strs(&mut out, &content.output);
        }
    }
    out
}

/// The length of `response`'s encoding, so it is built in one allocation.
fn encoded_len(response: &StoredResponse) -> usize {
    let opt = |text: &Option<String>| 5 + text.as_ref().map_or(0, String::len);
    let items: usize = response
        .items
        .iter()
        .map(|item| {
            opt(&item.id) + 4 + item.item_type.len() + opt(&item.call_id) + 33 + opt(&item.preceded_by)
        })
        .sum();
    let strs = |texts: &[String]| 4 + texts.iter().map(|t| 4 + t.len()).sum::<usize>();
    1 + 4
        + response.id.len()
        + 4
        + response.owner.provider.len()
        + opt(&response.owner.model)
        + opt(&response.team)
        + 16
        + opt(&response.previous_response_id)
        + 1
        + 4
        + items
        + 4
        + response
            .input_call_ids
            .iter()
            .map(|id| 4 + id.len())
            .sum::<usize>()
        + 1
        + response
            .content
            .as_ref()
            .map_or(0, |c| strs(&c.input) + strs(&c.output))
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    put_len(out, text.len());
    out.extend_from_slice(text.as_bytes());
}

fn put_opt(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        None => out.push(0),
        Some(text) => {
            out.push(1);
            put_str(out, text);
        }
    }
}

fn put_strs(out: &mut Vec<u8>, texts: &[String]) {
    put_len(out, texts.len());
    texts.iter().for_each(|text| put_str(out, text));
}

/// The response an encoding holds.
pub(crate) fn decode(bytes: &[u8]) -> Result<StoredResponse, Unreadable> {
    let mut r = Reader { bytes };
    if r.byte()? != VERSION {
        return Err(Unreadable("unknown version"));
    }
    let id = r.string()?;
    let owner = Owner {
        provider: r.string()?,
        model: r.opt()?,
    };
    let team = r.opt()?;
    let created_unix = r.u64()?;
    let expires_unix = r.u64()?;
    let previous_response_id = r.opt()?;
    let owner_only = r.byte()? != 0;
    let count = r.len()?;
    let mut items = Vec::with_capacity(count.min(r.bytes.len() / 40));
    for _ in 0..count {
        items.push(ItemRecord {
            id: r.opt()?,
            item_type: known_type(r.str()?),
            call_id: r.opt()?,
            digest: r.take(32)?.try_into().map_err(|_| Unreadable("digest"))?,
            has_encrypted_content: r.byte()? != 0,
            preceded_by: r.opt()?,
        });
    }
    let calls = r.len()?;
    let input_call_ids = (0..calls)
        .map(|_| r.str())
        .collect::<Result<CallIds, Unreadable>>()?;
    let content = match r.byte()? {
        0 => None,
        _ => Some(StoredContent {
            input: r.strings()?,
            output: r.strings()?,
        }),
    };
    if !r.bytes.is_empty() {
        return Err(Unreadable("trailing bytes"));
    }
    Ok(StoredResponse {
        id,
        owner,
        team,
        created_unix,
        expires_unix,
        previous_response_id,
        items,
        input_call_ids,
        content,
        owner_only,
    })
}

/// The response id and `expires_unix` of an encoding, read without decoding the rest.
pub(crate) fn id_and_expiry(bytes: &[u8]) -> Result<(&str, u64), Unreadable> {
    let mut r = Reader { bytes };
    r.byte()?;
    let id = r.str()?;
    r.str()?;
    r.opt_str()?;
    r.opt_str()?;
    r.u64()?;
    Ok((id, r.u64()?))
}

fn known_type(name: &str) -> Cow<'static, str> {
    match KNOWN_TYPES.iter().find(|known| **known == name) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(name.to_owned()),
    }
}

struct Reader<'b> {
    bytes: &'b [u8],
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], Unreadable> {
        if self.bytes.len() < n {
            return Err(Unreadable("too short"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn byte(&mut self) -> Result<u8, Unreadable> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, Unreadable> {
        let bytes = self.take(8)?;
        Ok(u64::from_le_bytes(
            bytes.try_into().map_err(|_| Unreadable("number"))?,
        ))
    }

    fn len(&mut self) -> Result<usize, Unreadable> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes(bytes.try_into().map_err(|_| Unreadable("length"))?) as usize)
    }

    fn str(&mut self) -> Result<&'b str, Unreadable> {
        let len = self.len()?;
        std::str::from_utf8(self.take(len)?).map_err(|_| Unreadable("text"))
    }

    fn string(&mut self) -> Result<String, Unreadable> {
        self.str().map(str::to_owned)
    }

    fn opt_str(&mut self) -> Result<Option<&'b str>, Unreadable> {
        match self.byte()? {
            0 => Ok(None),
            _ => self.str().map(Some),
        }
    }

    fn opt(&mut self) -> Result<Option<String>, Unreadable> {
        Ok(self.opt_str()?.map(str::to_owned))
    }

    fn strings(&mut self) -> Result<Vec<String>, Unreadable> {
        let count = self.len()?;
        (0..count).map(|_| self.string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::embedded::tests::response;

    #[test]
    fn a_record_reads_back_as_it_was_in_one_allocation_of_the_right_size() {
        let mut full = response("resp_full", 3, 60);
        full.previous_response_id = Some("resp_before".into());
        full.items[0].preceded_by = Some("rs_x".into());
        full.items[1].item_type = Cow::Owned("custom_tool_call".into());
        full.input_call_ids = ["call_a", "call_b"].into_iter().collect();
        full.content = Some(StoredContent {
            input: vec!["{\"role\":\"user\"}".into()],
            output: vec!["{}".into(), "[]".into()],
        });
        full.owner_only = true;
        let mut bare = response("resp_bare", 1, 60);
        bare.team = None;
        bare.owner.model = None;
        for stored in [full, bare] {
            let bytes = encode(&stored);
            assert_eq!(bytes.len(), encoded_len(&stored) - slack(&stored));
            assert_eq!(decode(&bytes).unwrap(), stored);
            assert_eq!(
                id_and_expiry(&bytes).unwrap(),
                (stored.id.as_str(), stored.expires_unix)
            );
        }
    }

    /// What [`encoded_len`] counts for absent texts beyond their one byte (it errs high).
    fn slack(stored: &StoredResponse) -> usize {
        let absent = |text: &Option<String>| if text.is_none() { 4 } else { 0 };
        absent(&stored.owner.model)
            + absent(&stored.team)
            + absent(&stored.previous_response_id)
            + stored
                .items
                .iter()
                .map(|i| absent(&i.id) + absent(&i.call_id) + absent(&i.preceded_by))
                .sum::<usize>()
    }

    #[test]
    fn a_cut_or_altered_encoding_is_unreadable_not_a_panic() {
        let bytes = encode(&response("resp_cut", 1, 60));
        for end in 0..bytes.len() {
            assert!(decode(&bytes[..end]).is_err(), "cut at {end}");
        }
        let mut other = bytes.clone();
        other[0] = 9;
        assert_eq!(decode(&other), Err(Unreadable("unknown version")));
    }
}
