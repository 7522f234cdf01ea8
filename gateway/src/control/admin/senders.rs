//! The cost table (`telemetry::costs`) as the admin endpoint shows it: `/debug/senders` (JSON,
//! what `kubegate status --top` reads) and the status page's tables, each over the window and
//! in the order the query asks (`?window=1m|10m&sort=time|requests|lists|bytes|watches|
//! rejections&n=N`).

use crate::control::admin::respond::{json, text};
use crate::state::Gateway;
use crate::telemetry::costs::{Row, SortBy, Window};
use bytes::Bytes;
use http::{Response, StatusCode, Uri};
use http_body_util::Full;
use kubegate_wire::target::Query;
use std::fmt::Write as _;

/// Rows of each list unless `n` says otherwise.
const ROWS: usize = 10;
/// The most rows a query may ask for: the whole table (ten one-minute slots of at most
/// 1,000 names each, and others).
const MAX_ROWS: usize = 20_000;

/// What a query asks of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    /// The window.
    pub window: Window,
    /// The order.
    pub sort: SortBy,
    /// Rows of each list.
    pub rows: usize,
}

impl Default for Asked {
    fn default() -> Self {
        Asked {
            window: Window::Minute,
            sort: SortBy::Time,
            rows: ROWS,
        }
    }
}

impl Asked {
    /// What `uri`'s query asks; what is wrong with it, in words, for a 400.
    pub fn of(uri: &Uri) -> Result<Asked, String> {
        let query = Query::new(uri.query());
        let mut asked = Asked::default();
        if let Some(value) = query.text("window") {
            asked.window = Window::parse(&value)
                .ok_or_else(|| format!("window={value}: expected 1m or 10m"))?;
        }
        if let Some(value) = query.text("sort") {
            asked.sort = SortBy::parse(&value).ok_or_else(|| {
                format!(
                    "sort={value}: expected time, requests, lists, bytes, watches or rejections"
                )
            })?;
        }
        if let Some(value) = query.text("n") {
            asked.rows = value
                .parse()
                .ok()
                .filter(|n| (1..=MAX_ROWS).contains(n))
                .ok_or_else(|| format!("n={value}: expected 1 to {MAX_ROWS}"))?;
        }
        Ok(asked)
    }
}

/// `/debug/senders`.
pub fn debug(gw: &Gateway, uri: &Uri) -> Response<Full<Bytes>> {
    match Asked::of(uri) {
        Ok(asked) => json(&gw.costs().report(asked.window, asked.sort, asked.rows)),
        Err(why) => text(StatusCode::BAD_REQUEST, format!("{why}\n")),
    }
}

/// The status page's cost tables, over the window and in the order `asked` says, each
/// figure's heading a link that orders by it.
pub fn tables(page: &mut String, gw: &Gateway, asked: Asked, esc: fn(&str) -> String) {
    let report = gw.costs().report(asked.window, asked.sort, asked.rows);
    let phrase = |window| match window {
        Window::Minute => "last minute",
        Window::TenMinutes => "last ten minutes",
    };
    let other = match asked.window {
        Window::Minute => Window::TenMinutes,
        Window::TenMinutes => Window::Minute,
    };
    let (window, sort) = (asked.window.as_str(), asked.sort.as_str());
    let _ = write!(
        page,
        "<h2 id=costs>Who costs what, {}</h2><div class=meta>Sorted by {sort}, largest first · \
         <a href='?window={}&amp;sort={sort}#costs'>the {}</a> · \
         <a href=/debug/senders?window={window}&amp;sort={sort}&amp;n=100>as JSON</a></div>",
        phrase(asked.window),
        other.as_str(),
        phrase(other),
    );
    costs(page, asked, "Sender", &report.senders, esc);
    costs(page, asked, "User agent", &report.user_agents, esc);
    let _ = write!(
        page,
        "<h2>Busiest kubectl commands, last minute</h2><table><tr><th>kubectl command<th>Requests</tr>"
    );
    if report.kubectl_commands.is_empty() {
        page.push_str("<tr><td colspan=2 class=quiet>no requests</tr>");
    }
    for row in &report.kubectl_commands {
        let _ = write!(
            page,
            "<tr><td>{}<td class=n>{}</tr>",
            esc(&row.name),
            row.cost.requests
        );
    }
    page.push_str("</table>");
}

/// One cost table.
fn costs(page: &mut String, asked: Asked, column: &str, rows: &[Row], esc: fn(&str) -> String) {
    let _ = write!(page, "<p></p><table><tr><th>{column}");
    for (sort, heading) in [
        (SortBy::Requests, "Requests"),
        (SortBy::Lists, "LISTs"),
        (SortBy::Time, "Apiserver s"),
        (SortBy::Bytes, "MiB sent"),
        (SortBy::Watches, "Open watches"),
        (SortBy::Rejections, "APF rejections"),
    ] {
        match sort == asked.sort {
            true => {
                let _ = write!(page, "<th>{heading} ▾");
            }
            false => {
                let _ = write!(
                    page,
                    "<th><a href='?window={}&amp;sort={}#costs'>{heading}</a>",
                    asked.window.as_str(),
                    sort.as_str()
                );
            }
        }
    }
    page.push_str("</tr>");
    if rows.is_empty() {
        page.push_str("<tr><td colspan=7 class=quiet>no requests</tr>");
    }
    for row in rows {
        let how = match row.identity {
            Some(i) => format!(" <span class=quiet>({})</span>", i.replace('_', " ")),
            None => String::new(),
        };
        let name = if row.name.is_empty() {
            "(none)"
        } else {
            &row.name
        };
        let c = &row.cost;
        let _ = write!(
            page,
            "<tr><td>{}{how}<td class=n>{}<td class=n>{}<td class=n>{:.3}<td class=n>{:.2}\
             <td class=n>{}<td class=n>{}</tr>",
            esc(name),
            c.requests,
            c.lists,
            c.apiserver_micros as f64 / 1e6,
            c.bytes as f64 / (1024.0 * 1024.0),
            row.open_watches,
            c.rejections,
        );
    }
    page.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_says_window_order_and_rows() {
        let asked = |q: &str| Asked::of(&format!("/debug/senders{q}").parse().unwrap());
        assert_eq!(asked(""), Ok(Asked::default()));
        assert_eq!(
            asked("?window=10m&sort=bytes&n=50"),
            Ok(Asked {
                window: Window::TenMinutes,
                sort: SortBy::Bytes,
                rows: 50
            })
        );
        assert!(asked("?window=1h").unwrap_err().contains("1m or 10m"));
        assert!(asked("?sort=cpu").unwrap_err().contains("sort=cpu"));
        assert!(asked("?n=0").is_err() && asked("?n=20001").is_err() && asked("?n=x").is_err());
    }
}
