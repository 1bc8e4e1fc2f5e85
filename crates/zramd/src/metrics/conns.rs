//! Connection counts of the NBD server and of the metrics endpoint itself: open now (by
//! state), accepted, refused, and closed by the server (and why).

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::family::{Kind, Of, Value, family};
use crate::table::{Counts, Table};

/// A counter per server: name, help, and which count it is.
type Total = (&'static str, &'static str, fn(&Counts) -> u64);

/// The connection tables to report, by server name (`nbd`, `metrics`).
#[derive(Debug)]
pub(crate) struct Connections(pub(crate) Vec<Arc<Table>>);

impl Collector for Connections {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        use Kind::{Counter, Gauge};
        let counts: Vec<(&str, Counts)> = self.0.iter().map(|t| (t.name(), t.counts())).collect();
        let per_server = |read: fn(&Counts) -> u64| {
            counts
                .iter()
                .map(move |(server, c)| ([("server", *server)], Value::Int(read(c))))
        };
        let open = counts.iter().flat_map(|(server, c)| {
            [("starting", c.starting), ("serving", c.serving)].map(|(state, n)| {
                (
                    [("server", *server), ("state", state)],
                    Value::Int(n as u64),
                )
            })
        });
        let help = "Connections open now (starting: NBD handshake or request not read yet)";
        family(&mut encoder, ("connections", Of::Count, Gauge, help), open)?;
        let totals: [Total; 2] = [
            ("connections_accepted", "Connections accepted", |c| {
                c.accepted
            }),
            (
                "connections_refused",
                "Connections refused at once because every connection was busy",
                |c| c.refused,
            ),
        ];
        for (name, help, read) in totals {
            family(
                &mut encoder,
                (name, Of::Count, Counter, help),
                per_server(read),
            )?;
        }
        let closed = counts.iter().flat_map(|(server, c)| {
            [
                ("evicted", c.evicted),
                ("timed_out", c.timed_out),
                ("stalled", c.stalled),
            ]
            .map(|(reason, n)| ([("server", *server), ("reason", reason)], Value::Int(n)))
        });
        let help = "Connections the server closed: evicted to make room, request or handshake \
                    not received in time, reply not taken or request not sent in time";
        family(
            &mut encoder,
            ("connections_closed", Of::Count, Counter, help),
            closed,
        )
    }
}
