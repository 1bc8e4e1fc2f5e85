//! The NBD wire format: constants, the messages' layouts, and pure parsers and encoders.
//!
//! Everything here works on byte slices and does no I/O, so it can be fuzzed
//! (`fuzz/fuzz_targets/nbd_parse.rs`, through [`super::rules::exercise_parsers`]) and unit-tested without sockets. All integers on the
//! wire are big-endian. Parsers never panic and never allocate in proportion to a length the
//! client sent: lengths are checked against the bytes actually present.

// ---- magics ---------------------------------------------------------------------------

/// `NBDMAGIC`: the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the newstyle magic, sent by the server and at the start of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
/// Magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// ---- handshake flags ------------------------------------------------------------------

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can leave out the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: leave out the 124 zero bytes.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// ---- transmission flags ---------------------------------------------------------------

/// Always set.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
/// The export refuses writes.
pub const FLAG_READ_ONLY: u16 = 1 << 1;
/// `NBD_CMD_FLUSH` is understood.
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
/// `NBD_CMD_FLAG_FUA` is understood.
pub const FLAG_SEND_FUA: u16 = 1 << 3;
/// The medium is rotational (never set by us).
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
/// `NBD_CMD_TRIM` is understood.
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
/// `NBD_CMD_WRITE_ZEROES` (and `NBD_CMD_FLAG_NO_HOLE`) is understood.
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// `NBD_CMD_FLAG_DF` is understood (only with structured replies).
pub const FLAG_SEND_DF: u16 = 1 << 7;
/// Several connections to the export see one another's writes at once.
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
/// `NBD_CMD_CACHE` is understood.
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
/// `NBD_CMD_FLAG_FAST_ZERO` is understood.
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// ---- options --------------------------------------------------------------------------

/// Choose an export and enter transmission (no error possible).
pub const OPT_EXPORT_NAME: u32 = 1;
/// End the negotiation.
pub const OPT_ABORT: u32 = 2;
/// List the exports.
pub const OPT_LIST: u32 = 3;
/// Upgrade to TLS (offered with `--tls on|require`).
pub const OPT_STARTTLS: u32 = 5;
/// Describe an export.
pub const OPT_INFO: u32 = 6;
/// Describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Use structured replies.
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// List metadata contexts.
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// Select metadata contexts.
pub const OPT_SET_META_CONTEXT: u32 = 10;
/// 64-bit extended headers (unsupported here).
pub const OPT_EXTENDED_HEADERS: u32 = 11;

/// Option reply: success / end of a list.
pub const REP_ACK: u32 = 1;
/// Option reply: one export of a list.
pub const REP_SERVER: u32 = 2;
/// Option reply: one piece of information about an export.
pub const REP_INFO: u32 = 3;
/// Option reply: one metadata context.
pub const REP_META_CONTEXT: u32 = 4;
/// Option error: unknown option.
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
/// Option error: refused by policy.
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
/// Option error: syntactically or semantically invalid.
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
/// The server requires TLS first (`NBD_REP_ERR_TLS_REQD`).
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
/// Option error: no such export.
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
/// Option error: the server is shutting down.
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
/// Option error: the request or reply is too large.
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

/// Information type: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// Information type: canonical name.
pub const INFO_NAME: u16 = 1;
/// Information type: human-readable description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Information type: block size constraints.
pub const INFO_BLOCK_SIZE: u16 = 3;

// ---- transmission ---------------------------------------------------------------------

/// Command: read.
pub const CMD_READ: u16 = 0;
/// Command: write (followed by the data).
pub const CMD_WRITE: u16 = 1;
/// Command: disconnect (no reply).
pub const CMD_DISC: u16 = 2;
/// Command: flush.
pub const CMD_FLUSH: u16 = 3;
/// Command: trim (discard).
pub const CMD_TRIM: u16 = 4;
/// Command: prefetch hint.
pub const CMD_CACHE: u16 = 5;
/// Command: write zeroes.
pub const CMD_WRITE_ZEROES: u16 = 6;
/// Command: block status.
pub const CMD_BLOCK_STATUS: u16 = 7;

/// Command flag: force unit access.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag (write zeroes): do not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag (read): at most one content chunk.
pub const CMD_FLAG_DF: u16 = 1 << 2;
/// Command flag (block status): one extent only.
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// Command flag (write zeroes): fail with `ENOTSUP` unless fast.
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Structured reply flag: the last chunk of the reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// Chunk type: nothing (final chunk of a successful reply).
pub const REPLY_TYPE_NONE: u16 = 0;
/// Chunk type: data at an offset.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Chunk type: zeroes at an offset.
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
/// Chunk type: block status descriptors.
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// Chunk type: an error.
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
/// Chunk type: an error at an offset.
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;

/// Error: operation not permitted.
pub const EPERM: u32 = 1;
/// Error: I/O error.
pub const EIO: u32 = 5;
/// Error: out of memory.
pub const ENOMEM: u32 = 12;
/// Error: invalid argument.
pub const EINVAL: u32 = 22;
/// Error: no space left.
pub const ENOSPC: u32 = 28;
/// Error: value too large.
pub const EOVERFLOW: u32 = 75;
/// Error: not supported.
pub const ENOTSUP: u32 = 95;
/// Error: the server is shutting down.
pub const ESHUTDOWN: u32 = 108;

/// `base:allocation` flag: the extent is not allocated.
pub const STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` flag: the extent reads as zeroes.
pub const STATE_ZERO: u32 = 1 << 1;

/// The only metadata context we serve.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// The id we give `base:allocation` when it is selected.
pub const BASE_ALLOCATION_ID: u32 = 1;

/// Longest string (export name, query) the protocol allows.
pub const MAX_STRING: usize = 4096;
/// Bytes of a request header.
pub const REQUEST_LEN: usize = 28;
/// Bytes of an option header.
pub const OPTION_HEADER_LEN: usize = 16;
/// Bytes of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Bytes of a structured reply chunk header.
pub const STRUCTURED_HEADER_LEN: usize = 20;

/// Why bytes did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Fewer bytes than the message needs.
    Short,
    /// A magic number did not match.
    BadMagic,
    /// An inner length disagrees with the bytes present.
    BadLength,
    /// A string is not UTF-8, contains NUL or is too long.
    BadString,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ParseError::Short => "message too short",
            ParseError::BadMagic => "bad magic number",
            ParseError::BadLength => "inner length does not match the data",
            ParseError::BadString => "string is not valid UTF-8, contains NUL or is too long",
        })
    }
}

impl std::error::Error for ParseError {}

/// A reader over a byte slice that fails instead of panicking.
#[derive(Debug)]
struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        if n > self.rest.len() {
            return Err(ParseError::BadLength);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ParseError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, ParseError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, ParseError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, ParseError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// A string of `len` bytes (checked against what is present before anything else).
    fn string(&mut self, len: u32) -> Result<&'a str, ParseError> {
        let len = usize::try_from(len).map_err(|_| ParseError::BadLength)?;
        parse_string(self.take(len)?)
    }

    fn finish(&self) -> Result<(), ParseError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(ParseError::BadLength)
        }
    }
}

/// A protocol string: UTF-8, no NUL, at most [`MAX_STRING`] bytes.
pub fn parse_string(bytes: &[u8]) -> Result<&str, ParseError> {
    if bytes.len() > MAX_STRING || bytes.contains(&0) {
        return Err(ParseError::BadString);
    }
    std::str::from_utf8(bytes).map_err(|_| ParseError::BadString)
}

/// Client flags sent after the server's greeting; unknown bits are an error (the server
/// must then drop the connection).
pub fn parse_client_flags(bytes: &[u8]) -> Result<u32, ParseError> {
    let mut c = Cursor::new(bytes);
    let flags = c.u32().map_err(|_| ParseError::Short)?;
    c.finish()?;
    if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(ParseError::BadMagic);
    }
    Ok(flags)
}

/// The header of an option the client sends during the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    /// The option (`OPT_*`).
    pub option: u32,
    /// Bytes of option data that follow.
    pub length: u32,
}

impl OptionHeader {
    /// Parses the 16-byte header (`IHAVEOPT`, option, length).
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        if bytes.len() < OPTION_HEADER_LEN {
            return Err(ParseError::Short);
        }
        let mut c = Cursor::new(bytes);
        if c.u64()? != IHAVEOPT {
            return Err(ParseError::BadMagic);
        }
        Ok(Self {
            option: c.u32()?,
            length: c.u32()?,
        })
    }
}

/// The data of `NBD_OPT_INFO` and `NBD_OPT_GO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    /// The export name (empty: the default export).
    pub name: &'a str,
    /// Information types asked for (`INFO_*`), in the client's order.
    pub requests: Vec<u16>,
}

impl<'a> InfoRequest<'a> {
    /// Parses name length, name, count and the 16-bit information requests; the lengths
    /// must account for every byte.
    pub fn parse(data: &'a [u8]) -> Result<Self, ParseError> {
        let mut c = Cursor::new(data);
        let name_len = c.u32()?;
        let name = c.string(name_len)?;
        let count = c.u16()?;
        // The count is checked against the bytes present before anything is allocated.
        if c.rest.len() != usize::from(count) * 2 {
            return Err(ParseError::BadLength);
        }
        let mut requests = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            requests.push(c.u16()?);
        }
        c.finish()?;
        Ok(Self { name, requests })
    }
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` and `NBD_OPT_SET_META_CONTEXT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextRequest<'a> {
    /// The export name.
    pub name: &'a str,
    /// The queries (each `namespace:leaf`).
    pub queries: Vec<&'a str>,
}

impl<'a> MetaContextRequest<'a> {
    /// Parses name length, name, query count and the length-prefixed queries; the lengths
    /// must account for every byte.
    pub fn parse(data: &'a [u8]) -> Result<Self, ParseError> {
        let mut c = Cursor::new(data);
        let name_len = c.u32()?;
        let name = c.string(name_len)?;
        let count = c.u32()?;
        // Each query needs at least its 4-byte length: a larger count cannot be honest.
        if u64::from(count) * 4 > c.rest.len() as u64 {
            return Err(ParseError::BadLength);
        }
        let mut queries = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let len = c.u32()?;
            queries.push(c.string(len)?);
        }
        c.finish()?;
        Ok(Self { name, queries })
    }
}

/// Which contexts a query names, among the ones we serve (only `base:allocation`).
///
/// `list` is true for `NBD_OPT_LIST_META_CONTEXT`, where the bare namespace `base:` is a
/// wildcard; for `NBD_OPT_SET_META_CONTEXT` it selects nothing. Unknown namespaces and
/// unknown `base:` leaves select nothing. A query without a colon is invalid.
pub fn query_selects_base_allocation(query: &str, list: bool) -> Result<bool, ParseError> {
    let Some((namespace, leaf)) = query.split_once(':') else {
        return Err(ParseError::BadString);
    };
    if namespace.is_empty() {
        return Err(ParseError::BadString);
    }
    Ok(namespace == "base" && (leaf == "allocation" || (list && leaf.is_empty())))
}

/// A transmission request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Command flags (`CMD_FLAG_*`).
    pub flags: u16,
    /// Command (`CMD_*`).
    pub kind: u16,
    /// The client's handle, echoed in the reply.
    pub handle: u64,
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub length: u32,
}

impl Request {
    /// Parses the 28-byte request header.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        if bytes.len() < REQUEST_LEN {
            return Err(ParseError::Short);
        }
        let mut c = Cursor::new(bytes);
        if c.u32()? != REQUEST_MAGIC {
            return Err(ParseError::BadMagic);
        }
        Ok(Self {
            flags: c.u16()?,
            kind: c.u16()?,
            handle: c.u64()?,
            offset: c.u64()?,
            length: c.u32()?,
        })
    }

    /// Encodes the header (for clients and tests).
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.kind.to_be_bytes());
        out[8..16].copy_from_slice(&self.handle.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset.to_be_bytes());
        out[24..28].copy_from_slice(&self.length.to_be_bytes());
        out
    }

    /// Bytes of payload that follow the header on the wire.
    pub fn payload_len(&self) -> u32 {
        if self.kind == CMD_WRITE {
            self.length
        } else {
            0
        }
    }
}

// ---- encoders -------------------------------------------------------------------------

/// The server's greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub fn greeting(handshake_flags: u16) -> [u8; 18] {
    let mut out = [0u8; 18];
    out[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    out[16..18].copy_from_slice(&handshake_flags.to_be_bytes());
    out
}

/// An option reply: header and data.
pub fn option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + data.len());
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// The reply to `NBD_OPT_EXPORT_NAME`: size, flags and (unless `no_zeroes`) 124 zeroes.
pub fn export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + 124);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
    out
}

/// `NBD_INFO_EXPORT` data.
pub fn info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out
}

/// `NBD_INFO_NAME` or `NBD_INFO_DESCRIPTION` data.
pub fn info_string(info: u16, text: &str) -> Vec<u8> {
    let text = truncate_str(text, MAX_STRING);
    let mut out = Vec::with_capacity(2 + text.len());
    out.extend_from_slice(&info.to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out
}

/// `NBD_INFO_BLOCK_SIZE` data.
pub fn info_block_size(minimum: u32, preferred: u32, maximum: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(14);
    out.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    out.extend_from_slice(&minimum.to_be_bytes());
    out.extend_from_slice(&preferred.to_be_bytes());
    out.extend_from_slice(&maximum.to_be_bytes());
    out
}

/// `NBD_REP_SERVER` data: name length, name, then the export's description (the rest of the
/// reply; empty for none).
pub fn rep_server(name: &str, description: &str) -> Vec<u8> {
    let name = truncate_str(name, MAX_STRING);
    let description = truncate_str(description, MAX_STRING);
    let mut out = Vec::with_capacity(4 + name.len() + description.len());
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(description.as_bytes());
    out
}

/// `NBD_REP_META_CONTEXT` data: id and name.
pub fn rep_meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// A simple reply header (data, if any, follows).
pub fn simple_reply(error: u32, handle: u64) -> [u8; SIMPLE_REPLY_LEN] {
    let mut out = [0u8; SIMPLE_REPLY_LEN];
    out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out[4..8].copy_from_slice(&error.to_be_bytes());
    out[8..16].copy_from_slice(&handle.to_be_bytes());
    out
}

/// A structured reply chunk header (`length` payload bytes follow).
pub fn structured_header(
    flags: u16,
    reply_type: u16,
    handle: u64,
    length: u32,
) -> [u8; STRUCTURED_HEADER_LEN] {
    let mut out = [0u8; STRUCTURED_HEADER_LEN];
    out[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&flags.to_be_bytes());
    out[6..8].copy_from_slice(&reply_type.to_be_bytes());
    out[8..16].copy_from_slice(&handle.to_be_bytes());
    out[16..20].copy_from_slice(&length.to_be_bytes());
    out
}

/// A final `NBD_REPLY_TYPE_ERROR` chunk with a message.
pub fn error_chunk(handle: u64, error: u32, message: &str) -> Vec<u8> {
    let message = truncate_str(message, MAX_STRING);
    let payload_len = 6 + message.len();
    let mut out = Vec::with_capacity(STRUCTURED_HEADER_LEN + payload_len);
    out.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        handle,
        payload_len as u32,
    ));
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message.as_bytes());
    out
}

/// A final `NBD_REPLY_TYPE_NONE` chunk.
pub fn none_chunk(handle: u64) -> [u8; STRUCTURED_HEADER_LEN] {
    structured_header(REPLY_FLAG_DONE, REPLY_TYPE_NONE, handle, 0)
}

/// A final `NBD_REPLY_TYPE_BLOCK_STATUS` chunk for one context.
pub fn block_status_chunk(handle: u64, context: u32, extents: &[(u32, u32)]) -> Vec<u8> {
    let payload_len = 4 + 8 * extents.len();
    let mut out = Vec::with_capacity(STRUCTURED_HEADER_LEN + payload_len);
    out.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        handle,
        u32::try_from(payload_len).unwrap_or(u32::MAX),
    ));
    out.extend_from_slice(&context.to_be_bytes());
    for &(len, flags) in extents {
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&flags.to_be_bytes());
    }
    out
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let r = Request {
            flags: CMD_FLAG_FUA,
            kind: CMD_WRITE,
            handle: 0x0102_0304_0506_0708,
            offset: 4096,
            length: 512,
        };
        assert_eq!(Request::parse(&r.encode()), Ok(r));
        let mut bad = r.encode();
        bad[0] ^= 1;
        assert_eq!(Request::parse(&bad), Err(ParseError::BadMagic));
        assert_eq!(Request::parse(&bad[..10]), Err(ParseError::Short));
    }

    #[test]
    fn info_request_lengths_must_add_up() {
        let mut d = Vec::new();
        d.extend_from_slice(&5u32.to_be_bytes());
        d.extend_from_slice(b"zram0");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&INFO_NAME.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        let r = InfoRequest::parse(&d).expect("valid");
        assert_eq!(r.name, "zram0");
        assert_eq!(r.requests, vec![INFO_NAME, INFO_BLOCK_SIZE]);
        assert!(InfoRequest::parse(&d[..d.len() - 1]).is_err());
        let mut long = d.clone();
        long.push(0);
        assert!(InfoRequest::parse(&long).is_err());
        let mut huge = d.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(InfoRequest::parse(&huge), Err(ParseError::BadLength));
    }

    #[test]
    fn meta_context_queries() {
        let mut d = Vec::new();
        d.extend_from_slice(&0u32.to_be_bytes());
        d.extend_from_slice(&2u32.to_be_bytes());
        for q in ["base:allocation", "qemu:dirty-bitmap:x"] {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        let r = MetaContextRequest::parse(&d).expect("valid");
        assert_eq!(r.queries, vec!["base:allocation", "qemu:dirty-bitmap:x"]);
        let mut lying = d.clone();
        lying[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            MetaContextRequest::parse(&lying),
            Err(ParseError::BadLength)
        );
        assert_eq!(query_selects_base_allocation("base:", true), Ok(true));
        assert_eq!(query_selects_base_allocation("base:", false), Ok(false));
        assert_eq!(
            query_selects_base_allocation("base:allocation", false),
            Ok(true)
        );
        assert_eq!(query_selects_base_allocation("qemu:x", true), Ok(false));
        assert!(query_selects_base_allocation("nocolon", true).is_err());
    }

    #[test]
    fn server_reply_carries_name_then_description() {
        assert_eq!(rep_server("zram0", ""), b"\0\0\0\x05zram0");
        assert_eq!(
            rep_server("ro", "1 GiB lz4"),
            b"\0\0\0\x02ro1 GiB lz4".to_vec()
        );
        let long = "é".repeat(MAX_STRING);
        let r = rep_server("a", &long);
        assert_eq!(r.len(), 4 + 1 + MAX_STRING, "cut on a character boundary");
        assert_eq!(info_string(INFO_DESCRIPTION, "d"), b"\0\x02d");
    }

    #[test]
    fn error_chunk_layout() {
        let c = error_chunk(7, EINVAL, "bad");
        assert_eq!(c.len(), 20 + 6 + 3);
        assert_eq!(&c[16..20], &9u32.to_be_bytes());
        assert_eq!(&c[20..24], &EINVAL.to_be_bytes());
    }
}
