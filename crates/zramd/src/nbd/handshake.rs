//! The handshake: fixed newstyle negotiation up to the transmission phase.
//!
//! The server greets with `NBDMAGIC`, `IHAVEOPT` and its handshake flags
//! (`FIXED_NEWSTYLE | NO_ZEROES`); the client answers with its flags and then sends options
//! until one of them (`EXPORT_NAME`, or `GO` answered with `ACK`) starts transmission or
//! `ABORT` ends the session. Every read and write is bounded by one deadline for the whole
//! handshake, and option data by [`MAX_OPTION_DATA`], so a silent or greedy client holds
//! neither a connection slot nor memory for long.

use std::io;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::ServerConfig;
use super::proto::*;
use super::tls::Tls;
use crate::device::Opened;
use crate::export::{Export, ExportSet};
use crate::stream::{Conn, deadline_in, discard_by, read_exact_by, write_all_by};

/// Option data longer than this is refused (`NBD_REP_ERR_TOO_BIG`) without being stored.
pub const MAX_OPTION_DATA: u32 = 64 * 1024;
/// Refused option data up to this length is read and dropped to keep the stream in step;
/// longer data (or any oversized `EXPORT_NAME`, which cannot be refused) ends the session.
pub const MAX_OPTION_SKIP: u32 = 1 << 20;

/// An export's description as `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION` send it, as the
/// device is now: `zram0: 1 GiB lz4 compressed RAM disk (zsmalloc)`, `, read-only` after it
/// where so, or `zram0: uninitialized compressed RAM disk` before its disksize is set.
fn description(export: &Export) -> String {
    describe(export, export.device.zram().as_deref())
}

/// [`description`] with the device's state already in hand (`None`: not initialized).
fn describe(export: &Export, zram: Option<&zram::Zram>) -> String {
    let what = match zram {
        Some(z) => {
            let size = crate::human::size(z.disksize());
            let (number, unit) = size.split_at(size.len() - 1);
            let unit = if unit == "B" {
                "bytes".to_owned()
            } else {
                format!("{unit}iB")
            };
            format!(
                "{number} {unit} {} compressed RAM disk ({})",
                z.algorithm(),
                z.allocator()
            )
        }
        None => "uninitialized compressed RAM disk".to_owned(),
    };
    let ro = if export.read_only { ", read-only" } else { "" };
    format!("{}: {what}{ro}", export.name)
}

/// The transmission flags of an export.
pub fn transmission_flags(read_only: bool, structured: bool) -> u16 {
    let mut flags = FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_CACHE | FLAG_CAN_MULTI_CONN;
    if read_only {
        flags |= FLAG_READ_ONLY;
    } else {
        flags |= FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
    }
    if structured {
        flags |= FLAG_SEND_DF;
    }
    flags
}

/// What the handshake agreed on.
#[derive(Debug)]
pub(crate) struct Session {
    /// The export served.
    pub export: Arc<Export>,
    /// The device, held open for the session.
    pub dev: Opened,
    /// Structured replies were negotiated.
    pub structured: bool,
    /// `base:allocation` was selected for this export.
    pub block_status: bool,
    /// After `NBD_OPT_STARTTLS`: the plain side of the TLS session, which transmission
    /// then uses instead of the client's socket.
    pub plain: Option<UnixStream>,
}

/// Negotiation state.
#[derive(Debug, Default)]
struct State {
    no_zeroes: bool,
    structured: bool,
    /// The export `base:allocation` was last selected for.
    meta: Option<Arc<Export>>,
}

/// One connection's negotiation.
struct Negotiation<'a, C> {
    conn: &'a mut C,
    exports: &'a ExportSet,
    max_request: u32,
    deadline: Instant,
    peer: &'a str,
    state: State,
    /// TLS as offered, and whether this connection runs it already.
    tls: Option<&'a Tls>,
    secure: bool,
}

/// Runs the handshake. `Ok(None)`: the session ended (abort, protocol violation, unknown
/// export); the caller closes the connection.
pub(crate) fn negotiate<C: Conn>(
    conn: &mut C,
    exports: &ExportSet,
    config: &ServerConfig,
    tls: Option<&Tls>,
    peer: &str,
) -> io::Result<Option<Session>> {
    // No limit, or an absurdly long one, is a day.
    let deadline = deadline_in(config.handshake_timeout.limit().unwrap_or(Duration::MAX));
    let mut n = Negotiation {
        conn,
        exports,
        max_request: config.effective_max_request(),
        deadline,
        peer,
        state: State::default(),
        tls,
        secure: false,
    };
    write_all_by(
        n.conn,
        &greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES),
        deadline,
    )?;
    let mut flags = [0u8; 4];
    read_exact_by(n.conn, &mut flags, deadline)?;
    match parse_client_flags(&flags) {
        Ok(f) => n.state.no_zeroes = f & FLAG_C_NO_ZEROES != 0,
        Err(_) => {
            warn!(peer, flags = ?flags, "nbd: unknown client flags; closing");
            return Ok(None);
        }
    }
    n.options()
}

impl<C: Conn> Negotiation<'_, C> {
    fn reply(&mut self, option: u32, reply_type: u32, data: &[u8]) -> io::Result<()> {
        write_all_by(
            self.conn,
            &option_reply(option, reply_type, data),
            self.deadline,
        )
    }

    fn error(&mut self, option: u32, reply_type: u32, message: &str) -> io::Result<()> {
        if reply_type == REP_ERR_UNSUP {
            debug!(peer = self.peer, option, "nbd: unsupported option");
        } else {
            warn!(
                peer = self.peer,
                option, reply_type, message, "nbd: option refused"
            );
        }
        self.reply(option, reply_type, message.as_bytes())
    }

    fn options(&mut self) -> io::Result<Option<Session>> {
        loop {
            let mut header = [0u8; OPTION_HEADER_LEN];
            read_exact_by(self.conn, &mut header, self.deadline)?;
            let Ok(h) = OptionHeader::parse(&header) else {
                warn!(peer = self.peer, "nbd: bad option magic; closing");
                return Ok(None);
            };
            debug!(
                peer = self.peer,
                option = h.option,
                length = h.length,
                "nbd: option"
            );
            if h.length > MAX_OPTION_DATA {
                if h.option == OPT_EXPORT_NAME || h.length > MAX_OPTION_SKIP {
                    warn!(
                        peer = self.peer,
                        length = h.length,
                        "nbd: option data too large; closing"
                    );
                    return Ok(None);
                }
                discard_by(self.conn, u64::from(h.length), self.deadline)?;
                self.error(h.option, REP_ERR_TOO_BIG, "option data too large")?;
                continue;
            }
            let mut data = vec![0u8; h.length as usize];
            read_exact_by(self.conn, &mut data, self.deadline)?;
            if let Some(outcome) = self.option(h.option, &data)? {
                return Ok(outcome);
            }
        }
    }

    /// Handles `NBD_OPT_STARTTLS`: acknowledges it, runs the TLS handshake and the rest of
    /// the negotiation over TLS (what was agreed before is forgotten, as proto.md asks).
    fn start_tls(&mut self, data: &[u8]) -> io::Result<Option<Option<Session>>> {
        let Some(tls) = self.tls else {
            self.error(OPT_STARTTLS, REP_ERR_UNSUP, "TLS is not offered")?;
            return Ok(None);
        };
        if !data.is_empty() || self.secure {
            let why = "NBD_OPT_STARTTLS takes no data and comes once";
            self.error(OPT_STARTTLS, REP_ERR_INVALID, why)?;
            return Ok(None);
        }
        self.reply(OPT_STARTTLS, REP_ACK, &[])?;
        let mut plain = tls.start(self.conn, self.deadline)?;
        let outcome = Negotiation {
            conn: &mut plain,
            exports: self.exports,
            max_request: self.max_request,
            deadline: self.deadline,
            peer: self.peer,
            state: State {
                no_zeroes: self.state.no_zeroes,
                ..State::default()
            },
            tls: self.tls,
            secure: true,
        }
        .options()?;
        Ok(Some(outcome.map(|session| Session {
            plain: Some(plain),
            ..session
        })))
    }

    /// Handles one option; `Some` ends the handshake.
    fn option(&mut self, option: u32, data: &[u8]) -> io::Result<Option<Option<Session>>> {
        if option == OPT_STARTTLS {
            return self.start_tls(data);
        }
        if self.tls.is_some_and(|t| t.require) && !self.secure && option != OPT_ABORT {
            if option == OPT_EXPORT_NAME {
                warn!(peer = self.peer, "nbd: EXPORT_NAME without TLS; closing");
                return Ok(Some(None));
            }
            self.error(
                option,
                REP_ERR_TLS_REQD,
                "TLS is required: NBD_OPT_STARTTLS first",
            )?;
            return Ok(None);
        }
        match option {
            OPT_EXPORT_NAME => {
                let export = parse_string(data)
                    .ok()
                    .and_then(|name| self.exports.get(name));
                let Some(export) = export.cloned() else {
                    warn!(
                        peer = self.peer,
                        "nbd: EXPORT_NAME of an unknown export; closing"
                    );
                    return Ok(Some(None));
                };
                let Some(session) = self.session(export) else {
                    warn!(
                        peer = self.peer,
                        "nbd: EXPORT_NAME of an uninitialized device; closing"
                    );
                    return Ok(Some(None));
                };
                let flags = transmission_flags(session.export.read_only, session.structured);
                let size = session.dev.disksize();
                let reply = export_name_reply(size, flags, self.state.no_zeroes);
                write_all_by(self.conn, &reply, self.deadline)?;
                return Ok(Some(Some(session)));
            }
            OPT_ABORT => {
                debug!(peer = self.peer, "nbd: client aborted the handshake");
                // The client may already be gone; that is fine.
                let _ = self.reply(option, REP_ACK, &[]);
                return Ok(Some(None));
            }
            OPT_LIST => {
                if !data.is_empty() {
                    self.error(option, REP_ERR_INVALID, "NBD_OPT_LIST takes no data")?;
                } else {
                    let list: Vec<(String, String)> = self
                        .exports
                        .iter()
                        .map(|e| (e.name.clone(), description(e)))
                        .collect();
                    for (name, text) in list {
                        self.reply(option, REP_SERVER, &rep_server(&name, &text))?;
                    }
                    self.reply(option, REP_ACK, &[])?;
                }
            }
            OPT_INFO | OPT_GO => return self.info(option, data),
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    self.error(
                        option,
                        REP_ERR_INVALID,
                        "NBD_OPT_STRUCTURED_REPLY takes no data",
                    )?;
                } else {
                    self.state.structured = true;
                    self.reply(option, REP_ACK, &[])?;
                }
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => self.meta_context(option, data)?,
            _ => self.error(option, REP_ERR_UNSUP, "option not supported")?,
        }
        Ok(None)
    }

    /// Opens the export's device for a session; `None` when it is not initialized.
    fn session(&self, export: Arc<Export>) -> Option<Session> {
        let block_status = self
            .state
            .meta
            .as_ref()
            .is_some_and(|m| Arc::ptr_eq(m, &export));
        let dev = export.device.open()?;
        Some(Session {
            export,
            dev,
            structured: self.state.structured,
            block_status,
            plain: None,
        })
    }

    fn info(&mut self, option: u32, data: &[u8]) -> io::Result<Option<Option<Session>>> {
        let Ok(req) = InfoRequest::parse(data) else {
            self.error(option, REP_ERR_INVALID, "malformed NBD_OPT_INFO/GO data")?;
            return Ok(None);
        };
        let Some(export) = self.exports.get(req.name).cloned() else {
            self.error(option, REP_ERR_UNKNOWN, "no such export")?;
            return Ok(None);
        };
        let Some(zram) = export.device.zram() else {
            self.error(
                option,
                REP_ERR_UNKNOWN,
                "device not initialized (no disksize)",
            )?;
            return Ok(None);
        };
        let size = zram.disksize();
        let flags = transmission_flags(export.read_only, self.state.structured);
        self.reply(option, REP_INFO, &info_export(size, flags))?;
        if req.requests.contains(&INFO_NAME) {
            self.reply(option, REP_INFO, &info_string(INFO_NAME, &export.name))?;
        }
        if req.requests.contains(&INFO_DESCRIPTION) {
            let text = describe(&export, Some(zram.as_ref()));
            self.reply(option, REP_INFO, &info_string(INFO_DESCRIPTION, &text))?;
        }
        // Sent whether asked or not: we enforce a maximum other than the default. The
        // preferred size is the device's compression unit (a page unless set larger), so
        // that clients write whole units rather than parts to be read, modified, rewritten.
        let unit = u32::try_from(zram.unit_size()).unwrap_or(4096);
        let preferred = if unit <= self.max_request { unit } else { 4096 };
        let block = info_block_size(1, preferred, self.max_request);
        self.reply(option, REP_INFO, &block)?;
        self.reply(option, REP_ACK, &[])?;
        if option == OPT_GO {
            drop(zram);
            return match self.session(export) {
                Some(session) => Ok(Some(Some(session))),
                // Reset between the INFO replies and here: the client sees a closed
                // connection rather than a device that vanished under it.
                None => Ok(Some(None)),
            };
        }
        Ok(None)
    }

    fn meta_context(&mut self, option: u32, data: &[u8]) -> io::Result<()> {
        let list = option == OPT_LIST_META_CONTEXT;
        if !list {
            // A SET replaces the selection even when it fails.
            self.state.meta = None;
        }
        if !self.state.structured {
            return self.error(
                option,
                REP_ERR_INVALID,
                "negotiate structured replies first",
            );
        }
        let Ok(req) = MetaContextRequest::parse(data) else {
            return self.error(option, REP_ERR_INVALID, "malformed meta context data");
        };
        let Some(export) = self.exports.get(req.name).cloned() else {
            return self.error(option, REP_ERR_UNKNOWN, "no such export");
        };
        let mut selected = list && req.queries.is_empty();
        for q in &req.queries {
            match query_selects_base_allocation(q, list) {
                Ok(s) => selected |= s,
                Err(_) => {
                    return self.error(
                        option,
                        REP_ERR_INVALID,
                        "query needs a namespace and a colon",
                    );
                }
            }
        }
        if selected {
            let id = if list { 0 } else { BASE_ALLOCATION_ID };
            self.reply(
                option,
                REP_META_CONTEXT,
                &rep_meta_context(id, BASE_ALLOCATION),
            )?;
            if !list {
                self.state.meta = Some(export);
            }
        }
        self.reply(option, REP_ACK, &[])
    }
}
