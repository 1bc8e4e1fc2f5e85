//! What the server accepts: the rules a request is judged by before anything is done, and
//! the block status extents of a range. Pure functions, fuzzed with the parsers.

use super::proto::*;

/// What the server knows when it judges a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Export size in bytes.
    pub size: u64,
    /// Largest read or write payload (the advertised maximum block size).
    pub max_request: u32,
    /// The export refuses writes.
    pub read_only: bool,
    /// Structured replies were negotiated.
    pub structured: bool,
    /// `base:allocation` was selected for this export.
    pub block_status: bool,
}

/// A refused request: the error to reply with and a message for humans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// `E*` value.
    pub error: u32,
    /// Why.
    pub message: &'static str,
}

const fn refuse(error: u32, message: &'static str) -> Refusal {
    Refusal { error, message }
}

/// Payloads of refused writes up to this size are read and dropped to keep the stream in
/// step (the protocol says lengths below 2^25 should not be treated as an attack); larger
/// ones end the connection after the error reply.
pub const MIN_SKIP_LIMIT: u32 = 1 << 25;

/// How many payload bytes of a refused write the server reads and drops before it gives up
/// on the connection.
pub fn skip_limit(limits: &Limits) -> u32 {
    limits.max_request.max(MIN_SKIP_LIMIT)
}

/// Flags each command accepts.
fn allowed_flags(kind: u16, structured: bool) -> Option<u16> {
    Some(match kind {
        CMD_READ if structured => CMD_FLAG_FUA | CMD_FLAG_DF,
        CMD_READ | CMD_WRITE | CMD_FLUSH | CMD_TRIM | CMD_CACHE => CMD_FLAG_FUA,
        CMD_DISC => u16::MAX,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_BLOCK_STATUS => CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
        _ => return None,
    })
}

/// Judges a request before anything is done: `Ok` when it may be served.
///
/// Errors follow proto.md: unknown commands and flags, and reads, trims and block status
/// requests beyond the end are `EINVAL`; writes (and write-zeroes) beyond the end are
/// `ENOSPC`; writes, trims and write-zeroes on a read-only export are `EPERM`; reads and
/// writes longer than the maximum block size are `EINVAL` (as is write-zeroes without
/// `FAST_ZERO`, which the protocol bounds too); block status needs structured replies and a
/// selected `base:allocation` context.
pub fn check_request(req: &Request, limits: &Limits) -> Result<(), Refusal> {
    let Some(allowed) = allowed_flags(req.kind, limits.structured) else {
        return Err(refuse(EINVAL, "unknown command"));
    };
    if req.flags & !allowed != 0 {
        return Err(refuse(EINVAL, "command flag not valid for this command"));
    }
    let within = req
        .offset
        .checked_add(u64::from(req.length))
        .is_some_and(|end| end <= limits.size);
    let writes = matches!(req.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && limits.read_only {
        return Err(refuse(EPERM, "the export is read-only"));
    }
    match req.kind {
        CMD_READ | CMD_WRITE if req.length > limits.max_request => {
            Err(refuse(EINVAL, "request longer than the maximum block size"))
        }
        CMD_WRITE_ZEROES
            if req.length > limits.max_request && req.flags & CMD_FLAG_FAST_ZERO == 0 =>
        {
            Err(refuse(EINVAL, "request longer than the maximum block size"))
        }
        CMD_WRITE | CMD_WRITE_ZEROES if !within => {
            Err(refuse(ENOSPC, "request reaches past the end of the export"))
        }
        CMD_READ | CMD_TRIM | CMD_CACHE | CMD_BLOCK_STATUS if !within => {
            Err(refuse(EINVAL, "request reaches past the end of the export"))
        }
        CMD_BLOCK_STATUS if !limits.structured || !limits.block_status => Err(refuse(
            EINVAL,
            "block status needs structured replies and base:allocation",
        )),
        CMD_BLOCK_STATUS if req.length == 0 => Err(refuse(EINVAL, "block status of zero bytes")),
        _ => Ok(()),
    }
}

/// Block status descriptors `(length, flags)` for `length` bytes at `offset`, one status
/// per page of `page_size` bytes from `status(page index)`; runs of equal status merge.
///
/// At most `max_extents` descriptors (one with `req_one`); the reply may then cover less
/// than asked, which the protocol allows. Never more than `length` bytes in all.
pub fn block_status_extents(
    offset: u64,
    length: u32,
    page_size: u64,
    max_extents: usize,
    req_one: bool,
    mut status: impl FnMut(u64) -> u32,
) -> Vec<(u32, u32)> {
    let max_extents = if req_one { 1 } else { max_extents.max(1) };
    let page_size = page_size.max(1);
    let end = offset.saturating_add(u64::from(length));
    let mut extents: Vec<(u32, u32)> = Vec::new();
    let mut pos = offset;
    while pos < end {
        let page = pos / page_size;
        let page_end = page.saturating_add(1).saturating_mul(page_size);
        let seg_end = page_end.min(end);
        // seg_end - pos <= length, which is a u32.
        let seg = u32::try_from(seg_end - pos).unwrap_or(u32::MAX);
        let st = status(page);
        let full = extents.len() == max_extents;
        match extents.last_mut() {
            Some(last) if last.1 == st => last.0 = last.0.saturating_add(seg),
            _ if full => break,
            _ => extents.push((seg, st)),
        }
        pos = seg_end;
    }
    extents
}

/// Runs every parser and the request judge on `data` (the fuzz target and the test suite's
/// random-input smoke test both call this). Panics only if a parser breaks its own
/// contract (e.g. a parsed request that does not encode back to the same bytes).
pub fn exercise_parsers(data: &[u8]) {
    let _ = parse_client_flags(data);
    let _ = parse_string(data);
    if let Ok(h) = OptionHeader::parse(data) {
        assert_eq!(data.get(8..12), Some(&h.option.to_be_bytes()[..]));
    }
    let body = data.get(1..).unwrap_or_default();
    if let Ok(info) = InfoRequest::parse(body) {
        assert_eq!(
            4 + info.name.len() + 2 + 2 * info.requests.len(),
            body.len()
        );
    }
    if let Ok(meta) = MetaContextRequest::parse(body) {
        for q in &meta.queries {
            let _ = query_selects_base_allocation(q, true);
            let _ = query_selects_base_allocation(q, false);
        }
    }
    if let Ok(req) = Request::parse(data) {
        assert_eq!(&req.encode()[..], &data[..REQUEST_LEN]);
        let tail = data.get(REQUEST_LEN..).unwrap_or_default();
        let pick = |i: usize| tail.get(i).copied().unwrap_or(0);
        let limits = Limits {
            size: u64::from(u32::from_be_bytes([pick(0), pick(1), pick(2), pick(3)])) << 12,
            max_request: u32::from_be_bytes([pick(4), pick(5), pick(6), 0]).max(4096),
            read_only: pick(7) & 1 != 0,
            structured: pick(7) & 2 != 0,
            block_status: pick(7) & 4 != 0,
        };
        if check_request(&req, &limits).is_ok() && req.kind == CMD_BLOCK_STATUS {
            // Bound the walk: the smoke test runs thousands of these.
            let length = req.length.min(1 << 22);
            let req_one = req.flags & CMD_FLAG_REQ_ONE != 0;
            let extents =
                block_status_extents(req.offset, length, 4096, 64, req_one, |p| (p % 3) as u32);
            let total: u64 = extents.iter().map(|e| u64::from(e.0)).sum();
            assert!(total <= u64::from(length));
            assert!(length == 0 || !extents.is_empty());
            assert!(extents.iter().all(|e| e.0 > 0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judging_requests() {
        let l = Limits {
            size: 1 << 20,
            max_request: 1 << 16,
            read_only: false,
            structured: false,
            block_status: false,
        };
        let req = |kind, flags, offset, length| Request {
            flags,
            kind,
            handle: 1,
            offset,
            length,
        };
        assert!(check_request(&req(CMD_READ, 0, 0, 4096), &l).is_ok());
        let e = |r: Result<(), Refusal>| r.err().map(|x| x.error);
        assert_eq!(
            e(check_request(&req(CMD_READ, 0, 1 << 20, 1), &l)),
            Some(EINVAL)
        );
        assert_eq!(
            e(check_request(&req(CMD_WRITE, 0, 1 << 20, 1), &l)),
            Some(ENOSPC)
        );
        assert_eq!(
            e(check_request(&req(CMD_READ, 0, u64::MAX, 2), &l)),
            Some(EINVAL)
        );
        assert_eq!(
            e(check_request(&req(CMD_WRITE, 0, 0, 1 << 17), &l)),
            Some(EINVAL)
        );
        assert_eq!(
            e(check_request(&req(CMD_READ, CMD_FLAG_DF, 0, 1), &l)),
            Some(EINVAL)
        );
        assert_eq!(e(check_request(&req(99, 0, 0, 0), &l)), Some(EINVAL));
        assert_eq!(
            e(check_request(&req(CMD_BLOCK_STATUS, 0, 0, 1), &l)),
            Some(EINVAL)
        );
        let ro = Limits {
            read_only: true,
            ..l
        };
        assert_eq!(e(check_request(&req(CMD_TRIM, 0, 0, 1), &ro)), Some(EPERM));
        assert!(check_request(&req(CMD_TRIM, 0, 0, 1 << 20), &l).is_ok());
        let fast = req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 1 << 20);
        assert!(check_request(&fast, &l).is_ok());
    }

    #[test]
    fn extents_merge_and_respect_limits() {
        // Pages: hole, hole, zero, data, data (4 KiB each); ask from 1 KiB to 18 KiB.
        let st = |p: u64| [3, 3, 2, 0, 0][p as usize];
        let e = block_status_extents(1024, 17 * 1024, 4096, 16, false, st);
        assert_eq!(e, vec![(7 * 1024, 3), (4096, 2), (6 * 1024, 0)]);
        let one = block_status_extents(1024, 17 * 1024, 4096, 16, true, st);
        assert_eq!(one, vec![(7 * 1024, 3)]);
        let two = block_status_extents(0, 20 * 1024, 4096, 2, false, st);
        assert_eq!(two, vec![(8192, 3), (4096, 2)]);
        assert!(block_status_extents(0, 0, 4096, 2, false, st).is_empty());
    }
}
