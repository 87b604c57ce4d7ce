//! `issuer audit`: the audit trail read back (`docs/operate.md`, "Audit trail"), as one line per
//! event for people or one JSON object per line for a SIEM; and the record of
//! `issuer keys rotate-kek`, which runs outside the admin commands.

use crate::admin::{run_on, unexpected};
use crate::data_dir::DataDir;
use crate::out;
use anyhow::{bail, Context as _};
use clap::Args;
use issuer::admin::{Command, Reply, MAX_AUDIT_READ};
use issuer::app::now;
use issuer::display;
use issuer::store::{Audit, AuditAction, AuditEvent};
use serde_json::json;

#[derive(Args)]
pub struct AuditArgs {
    /// Only events at or after TIME: RFC 3339 (`2026-11-24T14:00:00Z`, or with an offset), Unix
    /// seconds, or an age (`90s`, `30m`, `12h`, `7d`) [default: every event kept].
    #[arg(long, value_name = "TIME", value_parser = parse_since)]
    since: Option<u64>,
    /// One JSON object per line: `at` (RFC 3339, UTC), `actor`, `action`, `target`, `before`,
    /// `after`.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    dir: DataDir,
}

/// Prints the audit trail: from the running server's socket on the embedded store (or the data
/// dir itself when none runs), from the database on PostgreSQL.
pub fn run(args: &AuditArgs) -> anyhow::Result<()> {
    let cmd = Command::AuditRead {
        since: args.since.unwrap_or(0),
    };
    let events = match run_on(&args.dir, &cmd)? {
        Reply::Audit(events) => events,
        other => return Err(unexpected(&other)),
    };
    for e in &events {
        if args.json {
            out::json_line(&json_line(e))?;
        } else {
            out::line(&text_line(e))?;
        }
    }
    if events.len() >= MAX_AUDIT_READ {
        eprintln!(
            "issuer: the first {MAX_AUDIT_READ} events only; ask again with --since {}",
            events.last().map_or(0, |e| e.at)
        );
    }
    Ok(())
}

fn json_line(e: &AuditEvent) -> String {
    json!({
        "at": rfc3339(e.at),
        "actor": e.actor,
        "action": e.action.as_str(),
        "target": e.target,
        "before": e.before,
        "after": e.after,
    })
    .to_string()
}

/// One event as text: the actor and the target escaped ([`display::escape_text`]), the values
/// as JSON ([`display::escape_json`]), so no name someone chose forges a line.
fn text_line(e: &AuditEvent) -> String {
    format!(
        "{} {} {} {}: {} -> {}",
        rfc3339(e.at),
        display::escape_text(&e.actor),
        e.action.as_str(),
        display::escape_text(&e.target),
        display::escape_json(&e.before.to_string()),
        display::escape_json(&e.after.to_string())
    )
}

/// Records `issuer keys rotate-kek`: `resealed` secrets now sealed under the current KEK.
pub async fn record_rotate_kek(store: &dyn Audit, resealed: u64) -> anyhow::Result<()> {
    let event = AuditEvent::new(
        now(),
        &issuer::audit::process_user(),
        AuditAction::KeysRotateKek,
        "kek",
        json!({ "sealed_under": "previous" }),
        json!({ "sealed_under": "current", "resealed": resealed }),
    );
    store
        .record_audit(vec![event.encode()])
        .await
        .context("the secrets were re-sealed, but recording it in the audit trail failed")
}

/// Days from 1970-01-01 to the date (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `secs` since the epoch as RFC 3339 in UTC (`2026-11-24T14:00:00Z`).
pub fn rfc3339(secs: u64) -> String {
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `--since`: RFC 3339, Unix seconds, or an age before now.
fn parse_since(s: &str) -> anyhow::Result<u64> {
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(secs);
    }
    if let Some(age) = parse_age(s) {
        return Ok(now().saturating_sub(age));
    }
    parse_rfc3339(s).with_context(|| {
        format!("{s:?} is not RFC 3339 (2026-11-24T14:00:00Z), Unix seconds or an age (12h)")
    })
}

fn parse_age(s: &str) -> Option<u64> {
    let unit = match s.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    s[..s.len() - 1].parse::<u64>().ok()?.checked_mul(unit)
}

/// RFC 3339 (`2026-11-24T14:00:00Z`, any offset) as seconds since the epoch.
pub fn parse_rfc3339(s: &str) -> anyhow::Result<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> anyhow::Result<i64> {
        let part = s.get(from..from + len).context("too short")?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            bail!("not a number: {part:?}");
        }
        Ok(part.parse()?)
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        bail!("malformed date");
    }
    if b[13] != b':' || b[16] != b':' {
        bail!("malformed time");
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (h, mi, sec) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        bail!("out of range");
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            bail!("empty fraction");
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => bail!("malformed offset"),
            };
            let (oh, om) = (num(s.len() - 5, 2)?, num(s.len() - 2, 2)?);
            sign * (oh * 3600 + om * 60)
        }
        _ => bail!("malformed offset"),
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec.min(59) - offset;
    u64::try_from(secs).context("before 1970")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_and_takes_offsets() {
        for secs in [0, 951_782_400, 1_700_000_000, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&rfc3339(secs)).unwrap(), secs);
        }
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(
            parse_rfc3339("2023-11-14T23:13:20+01:00").unwrap(),
            1_700_000_000
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T20:13:20.123-02:00").unwrap(),
            1_700_000_000
        );
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20Z").unwrap(),
            1_700_000_000
        );
    }

    #[test]
    fn since_takes_seconds_ages_and_refuses_the_rest() {
        assert_eq!(parse_since("1700000000").unwrap(), 1_700_000_000);
        let an_hour_ago = parse_since("1h").unwrap();
        assert!(now() - an_hour_ago >= 3600 && now() - an_hour_ago < 3610);
        for bad in [
            "",
            "yesterday",
            "2023-13-01T00:00:00Z",
            "2023-11-14T22:13:20",
            "1x",
        ] {
            assert!(parse_since(bad).is_err(), "{bad}");
        }
    }
}
