//! The algorithm settings beyond `comp_algorithm`: `recomp_algorithm` (the secondary
//! algorithms recompression uses, by priority 1..=3) and `algorithm_params` (level and
//! dictionary of the primary algorithm, priority 0, or of a secondary one). Both are
//! settings: taken while the device is uninitialized, `EBUSY` once it is (the 2026 rule:
//! no parameter changes after initialization).

use zram::config::MAX_PRIORITY;
use zram::{Algorithm, AlgorithmParams, RecompAlgorithm, ZramConfig};

use super::{algorithm, algorithm_list, invalid, read_dictionary, stored_algorithm};
use crate::device::{Device, DeviceError};

/// `recomp_algorithm` as the kernel shows it: a line per priority set, `#N: ` then the
/// algorithms with the chosen one in brackets; nothing when none is set.
pub(super) fn recomp_algorithm_list(dev: &Device) -> String {
    let mut secondary = dev.settings().recomp_algorithm;
    secondary.sort_by_key(|r| r.priority);
    secondary
        .iter()
        .map(|r| format!("#{}: {}", r.priority, algorithm_list(r.algorithm)))
        .collect()
}

/// `recomp_algorithm`: `algo=NAME [priority=N]` (priority 1 when not said, as the kernel's),
/// and beyond the kernel `level=N`. Sets or replaces the algorithm of that priority; writing
/// the algorithm it already has without a level keeps its parameters.
pub(super) fn store_recomp_algorithm(dev: &Device, value: &[u8]) -> Result<(), DeviceError> {
    let bad = || invalid("recomp_algorithm", value);
    let text = std::str::from_utf8(value).map_err(|_| bad())?;
    let (mut algo, mut priority, mut level) = (None, 1u8, None);
    for word in text.split_whitespace() {
        let (k, v) = word
            .split_once('=')
            .filter(|(_, v)| !v.is_empty())
            .ok_or_else(bad)?;
        match k {
            "algo" => algo = Some(stored_algorithm("recomp_algorithm", v.as_bytes())?),
            "priority" => priority = v.parse::<u8>().map_err(|_| bad())?,
            "level" => level = Some(v.parse::<i32>().map_err(|_| bad())?),
            _ => return Err(bad()),
        }
    }
    let new = RecompAlgorithm {
        priority,
        algorithm: algo.ok_or_else(bad)?,
        params: AlgorithmParams {
            level,
            dictionary: None,
        },
    };
    new.check()?;
    dev.update_settings(|s| {
        match s
            .recomp_algorithm
            .iter_mut()
            .find(|r| r.priority == new.priority)
        {
            Some(old) if old.algorithm == new.algorithm && level.is_none() => {}
            Some(old) => *old = new,
            None => {
                s.recomp_algorithm.push(new);
                s.recomp_algorithm.sort_by_key(|r| r.priority);
            }
        }
        Ok(())
    })
}

/// The algorithm of priority `p` in these settings (0: the primary).
fn algorithm_of(s: &ZramConfig, p: u8) -> Option<Algorithm> {
    match p {
        0 => Some(s.algorithm),
        _ => s
            .recomp_algorithm
            .iter()
            .find(|r| r.priority == p)
            .map(|r| r.algorithm),
    }
}

/// The parameters of priority `p` in these settings.
fn params_of(s: &mut ZramConfig, p: u8) -> Option<&mut AlgorithmParams> {
    match p {
        0 => Some(&mut s.params),
        _ => s
            .recomp_algorithm
            .iter_mut()
            .find(|r| r.priority == p)
            .map(|r| &mut r.params),
    }
}

/// The priority `algorithm_params` names: `priority=` (whose algorithm `algo=` must be, when
/// both are given), else the priority of the algorithm `algo=` names, else 0.
fn target(
    s: &ZramConfig,
    algo: Option<Algorithm>,
    priority: Option<u8>,
) -> Result<u8, DeviceError> {
    let none = |what: String| DeviceError::invalid("algorithm_params", what);
    match (priority, algo) {
        (Some(p), algo) => match algorithm_of(s, p) {
            None => Err(none(format!(
                "priority={p}: no recomp_algorithm of that priority"
            ))),
            Some(have) if algo.is_some_and(|a| a != have) => {
                Err(none(format!("priority={p} is {have}")))
            }
            Some(_) => Ok(p),
        },
        (None, Some(a)) => (0..=MAX_PRIORITY)
            .find(|&p| algorithm_of(s, p) == Some(a))
            .ok_or_else(|| none(format!("algo={a} is not one of the device's algorithms"))),
        (None, None) => Ok(0),
    }
}

/// `algorithm_params`: `algo=NAME` or `priority=N` (0..=3: the primary or a secondary
/// algorithm), `level=N`, `dict=PATH`, separated by blanks; the level and dictionary replace
/// that algorithm's. Everything is checked before the dictionary file is touched: the words,
/// then the device's state (`EBUSY` once initialized: the parameters are the device's from
/// then on), then the algorithm named (`EINVAL` for a priority with no algorithm, a level
/// outside its range, a dictionary for an algorithm that takes none).
pub(super) fn store_algorithm_params(dev: &Device, value: &[u8]) -> Result<(), DeviceError> {
    let bad = |what: &[u8]| invalid("algorithm_params", what);
    let (mut algo, mut priority, mut level, mut dict_path) = (None, None, None, None);
    for kv in value
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty())
    {
        let eq = kv.iter().position(|&b| b == b'=').ok_or_else(|| bad(kv))?;
        let (k, v) = (&kv[..eq], &kv[eq + 1..]);
        let text = || std::str::from_utf8(v).map_err(|_| bad(kv));
        match k {
            _ if v.is_empty() => return Err(bad(kv)),
            b"priority" => {
                let p = text()?.parse::<u8>().ok().filter(|&p| p <= MAX_PRIORITY);
                priority = Some(p.ok_or_else(|| bad(kv))?);
            }
            b"algo" => algo = Some(algorithm(v)?),
            b"level" => level = Some(text()?.parse::<i32>().map_err(|_| bad(kv))?),
            b"dict" => dict_path = Some(v),
            _ => return Err(bad(kv)),
        }
    }
    if dev.initialized() {
        return Err(DeviceError::Busy);
    }
    let settings = dev.settings();
    let prio = target(&settings, algo, priority)?;
    if let Some(alg) = algorithm_of(&settings, prio) {
        // The algorithm's own check, before the file is read: an empty dictionary stands
        // for the one named.
        AlgorithmParams {
            level,
            dictionary: dict_path.map(|_| std::sync::Arc::default()),
        }
        .check(alg)?;
    }
    let dict = dict_path
        .map(read_dictionary)
        .transpose()?
        .map(std::sync::Arc::new);
    dev.update_settings(|s| {
        let params = params_of(s, prio).ok_or_else(|| {
            DeviceError::invalid("algorithm_params", format!("priority={prio} is gone"))
        })?;
        params.level = level;
        params.dictionary = dict;
        Ok(())
    })
}
