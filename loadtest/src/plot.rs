//! The SVG timeline: per run, requests per 100 ms (completed up in green, failed on first
//! attempt down in red), a lane per replica with its share of each second's requests, watch
//! breaks seen by clients (red ▼), watches the gateway continued itself (blue ●), leaderships
//! lost (black ✕), and the fault events as dashed lines with labels that never overlap.

use crate::report::{RunReport, BUCKET_MS, SHARE_BUCKET_MS};

const LEFT: f64 = 200.0;
const WIDTH: f64 = 900.0;
const MAIN_H: f64 = 90.0;
const LANE_H: f64 = 16.0;
const LABEL_ROW_H: f64 = 10.0;
const AXIS_H: f64 = 22.0;
/// Average width of one character of the 9 px label font.
const CHAR_W: f64 = 5.0;
/// The title and the legend under it: each line fits the plot's width (see the test).
const TITLE: &str = "Requests through the gateway while apiservers restart, crash or hang";
const LEGEND: [&str; 2] = [
    "Requests per 100 ms: completed (green, up), failed on first attempt (red, down).",
    "Replica lanes: each replica's share of each second's requests. ▼ a watch broke under its client; ● the gateway continued a watch unseen; ✕ a leader lost its lease.",
];
/// Average character widths of the 13 px bold title and the 11 px legend.
const TITLE_CHAR_W: f64 = 7.6;
const LEGEND_CHAR_W: f64 = 6.0;
const REPLICA_COLOURS: [&str; 5] = ["#2a6", "#c80", "#68c", "#a4a", "#888"];

/// Places labels (x, text) in as few rows as needed so none overlaps another; returns each
/// label's row.
fn label_rows(labels: &[(f64, &str)]) -> Vec<usize> {
    let mut ends: Vec<f64> = Vec::new();
    labels
        .iter()
        .map(|(x, text)| {
            let width = text.chars().count() as f64 * CHAR_W + 6.0;
            let row = ends.iter().position(|end| *end <= *x).unwrap_or_else(|| {
                ends.push(f64::MIN);
                ends.len() - 1
            });
            ends[row] = x + width;
            row
        })
        .collect()
}

/// The whole plot.
pub fn svg(runs: &[RunReport]) -> String {
    let runs: Vec<&RunReport> = runs.iter().filter(|r| r.status == "ok").collect();
    let longest_ms = runs
        .iter()
        .map(|r| r.timeline.len() as u64 * BUCKET_MS)
        .max()
        .unwrap_or(BUCKET_MS)
        .max(BUCKET_MS) as f64;
    let px_per_ms = WIDTH / longest_ms;
    let mut body = String::new();
    let mut y = 62.0;
    for r in &runs {
        y = run(&mut body, r, y, px_per_ms, longest_ms) + 18.0;
    }
    // Wide enough for the plot and for the longest line of text above it.
    let text_w = (TITLE.chars().count() as f64 * TITLE_CHAR_W).max(
        LEGEND
            .iter()
            .map(|l| l.chars().count() as f64 * LEGEND_CHAR_W)
            .fold(0.0, f64::max),
    );
    let total_w = (LEFT + WIDTH + 30.0).max(text_w + 20.0);
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{total_w}\" height=\"{y}\" viewBox=\"0 0 {total_w} {y}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>\n<text x=\"10\" y=\"34\" fill=\"#333\">{}</text>\n<text x=\"10\" y=\"48\" fill=\"#333\">{}</text>\n{body}</svg>\n",
        xml(TITLE),
        xml(LEGEND[0]),
        xml(LEGEND[1])
    )
}

/// Draws one run from `top`; returns where it ends.
fn run(s: &mut String, r: &RunReport, top: f64, px_per_ms: f64, longest_ms: f64) -> f64 {
    let x_of = |ms: u64| LEFT + ms as f64 * px_per_ms;
    let labels: Vec<(f64, &str)> = r
        .events
        .iter()
        .map(|(at, what)| (x_of(*at), what.as_str()))
        .collect();
    let rows = label_rows(&labels);
    let label_h = (rows.iter().max().map_or(0, |m| m + 1)) as f64 * LABEL_ROW_H;
    let main_top = top + label_h + 4.0;
    let mid = main_top + MAIN_H * 0.6;
    let replicas = r.replica_timeline.first().map_or(0, Vec::len);
    let lanes_top = main_top + MAIN_H + 4.0;
    let axis_y = lanes_top + replicas as f64 * LANE_H + 4.0;
    let bottom = axis_y + AXIS_H;

    // Who and what, on the left.
    // A count is red only when something failed.
    let failed = r.client_go_failed();
    s.push_str(&format!(
        "<text x=\"10\" y=\"{:.1}\" font-weight=\"bold\">{}</text>\n<text x=\"10\" y=\"{:.1}\">{}</text>\n<text x=\"10\" y=\"{:.1}\" fill=\"{}\">client-go failures: {failed}</text>\n<text x=\"10\" y=\"{:.1}\" fill=\"#555\" font-size=\"9\">ambiguous writes: {}</text>\n",
        mid - 22.0,
        xml(&r.gateway),
        mid - 8.0,
        xml(&r.scenario),
        mid + 6.0,
        if failed > 0 { "#b00" } else { "#555" },
        mid + 20.0,
        r.ambiguous_writes.total
    ));

    // Requests per 100 ms, with a y scale in requests: one scale for both directions, so
    // that completed bars fit above the middle line and failed ones below it, inside the
    // main area (not over the replica lanes).
    let peak_ok = r.timeline.iter().map(|(ok, _)| *ok).max().unwrap_or(0);
    let peak_bad = r.timeline.iter().map(|(_, bad)| *bad).max().unwrap_or(0);
    let peak = peak_ok.max(peak_bad).max(1);
    let scale =
        (MAIN_H * 0.55 / peak_ok.max(1) as f64).min((MAIN_H * 0.38 - 2.0) / peak_bad.max(1) as f64);
    let bar = BUCKET_MS as f64 * px_per_ms;
    // A bar never runs past the axis's end.
    let width_at = |x: f64, w: f64| w.min(LEFT + WIDTH - x).max(0.0);
    s.push_str(&format!(
        "<line x1=\"{LEFT}\" y1=\"{mid:.1}\" x2=\"{:.1}\" y2=\"{mid:.1}\" stroke=\"#999\" stroke-width=\"0.5\"/>\n<line x1=\"{LEFT}\" y1=\"{main_top:.1}\" x2=\"{LEFT}\" y2=\"{:.1}\" stroke=\"#999\" stroke-width=\"0.5\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"end\" fill=\"#555\">{peak} req / 100 ms</text>\n",
        LEFT + WIDTH,
        main_top + MAIN_H,
        LEFT - 4.0,
        mid - peak as f64 * scale + 8.0,
    ));
    for (i, (ok, bad)) in r.timeline.iter().enumerate() {
        let x = x_of(i as u64 * BUCKET_MS);
        if *ok > 0 {
            let h = *ok as f64 * scale;
            s.push_str(&format!("<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{h:.1}\" fill=\"#2a2\"/>\n", mid - h, width_at(x, bar.max(0.5))));
        }
        if *bad > 0 {
            let h = (*bad as f64 * scale).max(2.0);
            s.push_str(&format!("<rect x=\"{x:.1}\" y=\"{mid:.1}\" width=\"{:.2}\" height=\"{h:.1}\" fill=\"#d22\"/>\n", width_at(x, bar.max(1.0))));
        }
    }

    // Watch breaks seen by clients, and watches the gateway continued unseen.
    for b in &r.watch.breaks {
        let x = x_of(b.at_ms);
        s.push_str(&format!(
            "<path d=\"M{:.1},{:.1} l6,0 l-3,6 z\" fill=\"#d22\"/>\n",
            x - 3.0,
            main_top
        ));
    }
    for (at, who) in &r.leader.lost {
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" font-weight=\"bold\" text-anchor=\"middle\" fill=\"#000\"><title>{} lost its lease</title>✕</text>\n",
            x_of(*at),
            main_top + 22.0,
            xml(who)
        ));
    }
    for at in &r.watch.gateway_resumes {
        s.push_str(&format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"#36c\"/>\n",
            x_of(*at),
            main_top + 10.0
        ));
    }

    // A lane per replica: its share of each second's successful requests.
    let share_bar = SHARE_BUCKET_MS as f64 * px_per_ms;
    for replica in 0..replicas {
        let lane_bottom = lanes_top + (replica + 1) as f64 * LANE_H - 2.0;
        let colour = REPLICA_COLOURS[replica % REPLICA_COLOURS.len()];
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"end\" fill=\"{colour}\">replica-{} share (0–100 %)</text>\n<line x1=\"{LEFT}\" y1=\"{lane_bottom:.1}\" x2=\"{:.1}\" y2=\"{lane_bottom:.1}\" stroke=\"#ddd\" stroke-width=\"0.5\"/>\n",
            LEFT - 4.0,
            lane_bottom,
            replica + 1,
            LEFT + WIDTH
        ));
        for (b, counts) in r.replica_timeline.iter().enumerate() {
            let all: u64 = counts.iter().sum();
            if all == 0 || counts[replica] == 0 {
                continue;
            }
            let h = (LANE_H - 3.0) * counts[replica] as f64 / all as f64;
            let x = x_of(b as u64 * SHARE_BUCKET_MS);
            s.push_str(&format!(
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{h:.1}\" fill=\"{colour}\"/>\n",
                lane_bottom - h,
                width_at(x, share_bar.max(0.5))
            ));
        }
    }

    // Fault events: a dashed line through the run, the label in its own row above.
    for ((x, what), row) in labels.iter().zip(&rows) {
        let label_y = top + (*row as f64 + 1.0) * LABEL_ROW_H - 2.0;
        s.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{axis_y:.1}\" stroke=\"#36c\" stroke-dasharray=\"3,2\"/>\n<text x=\"{:.1}\" y=\"{label_y:.1}\" fill=\"#36c\" font-size=\"9\">{}</text>\n",
            label_y + 2.0,
            x + 2.0,
            xml(what)
        ));
    }

    // Time axis, in seconds since traffic began.
    s.push_str(&format!(
        "<line x1=\"{LEFT}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"#333\" stroke-width=\"0.5\"/>\n",
        LEFT + WIDTH
    ));
    let step_ms = if longest_ms > 120_000.0 {
        20_000
    } else {
        10_000
    };
    let mut t = 0u64;
    while t as f64 <= longest_ms {
        let x = x_of(t);
        // The first tick's label starts at its tick, clear of the axis label on its left.
        let anchor = if t == 0 { "start" } else { "middle" };
        s.push_str(&format!(
            "<line x1=\"{x:.1}\" y1=\"{axis_y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#333\" stroke-width=\"0.5\"/>\n<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"{anchor}\">{} s</text>\n",
            axis_y + 4.0,
            axis_y + 14.0,
            t / 1000
        ));
        t += step_ms;
    }
    s.push_str(&format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\" text-anchor=\"end\" fill=\"#555\">time since traffic began</text>\n",
        LEFT - 4.0,
        axis_y + 14.0
    ));
    bottom
}

fn xml(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_close_together_go_to_separate_rows_and_far_ones_share_a_row() {
        let rows = label_rows(&[
            (100.0, "replica-1 exited"),
            (104.0, "replica-1 ready"),
            (108.0, "SIGTERM replica-2"),
            (400.0, "replica-2 exited"),
        ]);
        assert_eq!(rows, vec![0, 1, 2, 0]);
    }

    /// Every `<rect>` of a run's drawing as (x, y, width, height, fill).
    fn rects(svg: &str) -> Vec<(f64, f64, f64, f64, String)> {
        let attr = |line: &str, name: &str| -> Option<String> {
            let start = line.find(&format!(" {name}=\""))? + name.len() + 3;
            let len = line[start..].find('"')?;
            Some(line[start..start + len].to_string())
        };
        svg.lines()
            .filter(|l| l.starts_with("<rect x="))
            .map(|l| {
                let n = |name| attr(l, name).unwrap().parse::<f64>().unwrap();
                (
                    n("x"),
                    n("y"),
                    n("width"),
                    n("height"),
                    attr(l, "fill").unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn bars_stay_inside_their_areas_and_failures_are_red_only_when_some_failed() {
        // More failures than successes at the peak, and a timeline whose last bucket ends
        // at the axis's end.
        let mut timeline = vec![(20, 0); 100];
        timeline[50] = (2, 40);
        let mut report = RunReport {
            timeline,
            replica_timeline: vec![vec![5, 5]; 10],
            ..RunReport::unavailable("restart-one", "kubegate", "ok".into())
        };
        let mut s = String::new();
        let top = 62.0;
        run(&mut s, &report, top, WIDTH / 10_000.0, 10_000.0);
        let main_top = top + 4.0;
        let lanes_top = main_top + MAIN_H + 4.0;
        for (x, y, w, h, fill) in rects(&s) {
            assert!(
                x >= LEFT && x + w <= LEFT + WIDTH + 0.01,
                "{x} + {w} past the axis"
            );
            let (from, to) = if fill == "#2a2" || fill == "#d22" {
                (main_top, main_top + MAIN_H)
            } else {
                (lanes_top, lanes_top + 2.0 * LANE_H)
            };
            assert!(
                y >= from - 0.01 && y + h <= to + 0.01,
                "{fill} bar {y}..{} outside {from}..{to}",
                y + h
            );
        }
        assert!(
            !s.contains("fill=\"#b00\">client-go failures"),
            "no failure drawn red"
        );
        report.client_go_failures.insert("watch".into(), 1);
        let mut s = String::new();
        run(&mut s, &report, top, WIDTH / 10_000.0, 10_000.0);
        assert!(s.contains("fill=\"#b00\">client-go failures: 1"));
    }

    #[test]
    fn the_title_and_legend_fit_and_the_first_tick_clears_the_axis_label() {
        // Within the plot's own width: the picture is not widened for its text.
        let width = LEFT + WIDTH + 30.0 - 10.0;
        assert!(
            TITLE.chars().count() as f64 * TITLE_CHAR_W <= width,
            "title too long"
        );
        for line in LEGEND {
            assert!(
                line.chars().count() as f64 * LEGEND_CHAR_W <= width,
                "{line}"
            );
        }
        let mut s = String::new();
        let report = RunReport {
            timeline: vec![(1, 0); 100],
            ..RunReport::unavailable("restart-one", "kubegate", "ok".into())
        };
        run(&mut s, &report, 62.0, WIDTH / 10_000.0, 10_000.0);
        let first_tick = s
            .lines()
            .find(|l| l.ends_with(">0 s</text>"))
            .expect("a 0 s tick");
        assert!(
            first_tick.contains(r#"text-anchor="start""#),
            "{first_tick}"
        );
        let axis_label = s
            .lines()
            .find(|l| l.contains("time since traffic began"))
            .unwrap();
        assert!(
            axis_label.contains(r#"text-anchor="end""#)
                && axis_label.contains(&format!("x=\"{:.1}\"", LEFT - 4.0))
        );
    }
}
