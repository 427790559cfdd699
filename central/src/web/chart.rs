//! The usage page's charts: a day's tokens or dollars as a bar, stacked by
//! model, laid out here as SVG boxes the template writes inline. No script
//! draws them, and the page's policy allows no inline style: a model's
//! colour is a class of the stylesheet (`m0`..`m7`).

use std::collections::{BTreeMap, HashMap};

use kith_proto::{UsageRow, UsageTotals};

/// The drawing's width and height in its own units (it scales to the page).
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 180.0;
/// Room under the bars for the days' labels.
const AXIS: f64 = 20.0;
/// The colour classes the stylesheet defines.
const N_COLOURS: usize = 8;

/// What a chart measures of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Measure {
    /// Every kind of token, summed.
    Tokens,
    /// Dollars (unpriced tokens add none).
    Cost,
}

impl Measure {
    fn of(self, t: &UsageTotals) -> f64 {
        match self {
            Measure::Tokens => tokens(t) as f64,
            Measure::Cost => t.cost_usd,
        }
    }

    fn say(self, v: f64) -> String {
        match self {
            Measure::Tokens => format!("{} tokens", thousands(v.round() as u64)),
            Measure::Cost => dollars(v),
        }
    }
}

/// A usage row's tokens of every kind.
pub(super) fn tokens(t: &UsageTotals) -> u64 {
    t.input_tokens
        .saturating_add(t.output_tokens)
        .saturating_add(t.cache_write_tokens)
        .saturating_add(t.cache_read_tokens)
}

/// `1234567` as `1,234,567`.
pub(super) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Dollars to the cent, and to the tenth of a cent under a dollar.
pub(super) fn dollars(usd: f64) -> String {
    if usd != 0.0 && usd.abs() < 1.0 {
        format!("${usd:.3}")
    } else {
        format!("${usd:.2}")
    }
}

/// One model's part of one day's bar.
pub(super) struct Segment {
    pub x: String,
    pub y: String,
    pub width: String,
    pub height: String,
    /// The stylesheet's class for the model's colour.
    pub colour: String,
    /// Shown on hover: the day, the model and its figure.
    pub title: String,
}

/// A day's label under its bar.
pub(super) struct DayLabel {
    pub x: String,
    pub y: String,
    pub text: String,
}

/// A chart of one measure, and its legend.
pub(super) struct Chart {
    pub id: &'static str,
    pub heading: &'static str,
    pub view_box: String,
    pub segments: Vec<Segment>,
    pub days: Vec<DayLabel>,
    /// The tallest bar's figure, said at the top.
    pub max: String,
    /// (model, colour class), by colour.
    pub legend: Vec<(String, String)>,
}

/// The chart of `measure` from a daily report split by model (`rows` keyed
/// by day, grouped by model): a bar per day, a segment per model that day,
/// the models in the same order in every bar.
pub(super) fn stacked(
    id: &'static str,
    heading: &'static str,
    rows: &[UsageRow],
    measure: Measure,
) -> Chart {
    // Biggest users of tokens first: they get the first colours.
    let mut by_model: HashMap<&str, u64> = HashMap::new();
    for r in rows {
        *by_model.entry(model_of(r)).or_default() += tokens(&r.totals);
    }
    let mut models: Vec<(&str, u64)> = by_model.into_iter().collect();
    models.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let colour: HashMap<&str, String> = models
        .iter()
        .enumerate()
        .map(|(i, (m, _))| (*m, format!("m{}", i % N_COLOURS)))
        .collect();
    let rank: HashMap<&str, usize> = models
        .iter()
        .enumerate()
        .map(|(i, (m, _))| (*m, i))
        .collect();

    let mut days: BTreeMap<&str, Vec<&UsageRow>> = BTreeMap::new();
    for r in rows {
        days.entry(r.key.as_str()).or_default().push(r);
    }
    let tallest = days
        .values()
        .map(|rs| rs.iter().map(|r| measure.of(&r.totals)).sum::<f64>())
        .fold(0.0_f64, f64::max);
    let scale = if tallest > 0.0 {
        (HEIGHT - AXIS) / tallest
    } else {
        0.0
    };
    let slot = WIDTH / days.len().max(1) as f64;
    let bar = slot * 0.7;
    let label_every = days.len().div_ceil(12).max(1);

    let mut segments = Vec::new();
    let mut labels = Vec::new();
    for (i, (day, mut rs)) in days.into_iter().enumerate() {
        let x = i as f64 * slot + (slot - bar) / 2.0;
        rs.sort_by_key(|r| rank.get(model_of(r)).copied().unwrap_or(usize::MAX));
        let mut top = HEIGHT - AXIS;
        for r in rs {
            let value = measure.of(&r.totals);
            let height = value * scale;
            top -= height;
            let model = model_of(r);
            segments.push(Segment {
                x: format!("{x:.1}"),
                y: format!("{top:.1}"),
                width: format!("{bar:.1}"),
                height: format!("{height:.1}"),
                colour: colour.get(model).cloned().unwrap_or_default(),
                title: format!("{day} · {model}: {}", measure.say(value)),
            });
        }
        if i.is_multiple_of(label_every) {
            labels.push(DayLabel {
                x: format!("{:.1}", x + bar / 2.0),
                y: format!("{:.1}", HEIGHT - 5.0),
                text: day.get(5..).unwrap_or(day).to_owned(),
            });
        }
    }
    Chart {
        id,
        heading,
        view_box: format!("0 0 {WIDTH} {HEIGHT}"),
        segments,
        days: labels,
        max: measure.say(tallest),
        legend: models
            .iter()
            .map(|(m, _)| ((*m).to_owned(), colour.get(m).cloned().unwrap_or_default()))
            .collect(),
    }
}

fn model_of(r: &UsageRow) -> &str {
    r.group.as_deref().unwrap_or("unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(day: &str, model: &str, input: u64, usd: f64) -> UsageRow {
        UsageRow {
            key: day.to_owned(),
            group: Some(model.to_owned()),
            person: None,
            totals: UsageTotals {
                input_tokens: input,
                cost_usd: usd,
                ..UsageTotals::default()
            },
        }
    }

    #[test]
    fn a_bar_per_day_a_segment_per_model_that_day_scaled_to_the_tallest() {
        let rows = [
            row("2026-05-01", "opus", 300, 3.0),
            row("2026-05-01", "sonnet", 100, 0.5),
            row("2026-05-02", "opus", 200, 2.0),
        ];
        let chart = stacked("t", "Tokens", &rows, Measure::Tokens);
        let boxes: Vec<(&str, &str, &str, &str)> = chart
            .segments
            .iter()
            .map(|s| {
                (
                    s.x.as_str(),
                    s.y.as_str(),
                    s.height.as_str(),
                    s.colour.as_str(),
                )
            })
            .collect();
        // The tallest day (400 tokens) fills the 160 units above the axis;
        // opus (most tokens) is at the bottom of each bar, in the first colour.
        assert_eq!(
            boxes,
            [
                ("54.0", "40.0", "120.0", "m0"),
                ("54.0", "0.0", "40.0", "m1"),
                ("414.0", "80.0", "80.0", "m0"),
            ]
        );
        assert_eq!(chart.segments[1].title, "2026-05-01 · sonnet: 100 tokens");
        assert_eq!(chart.max, "400 tokens");
        assert_eq!(
            chart.legend,
            [
                ("opus".to_owned(), "m0".to_owned()),
                ("sonnet".to_owned(), "m1".to_owned())
            ]
        );
        let days: Vec<&str> = chart.days.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(days, ["05-01", "05-02"]);

        let cost = stacked("c", "Cost", &rows, Measure::Cost);
        assert_eq!(cost.segments.len(), 3);
        assert_eq!(cost.max, "$3.50");
        assert_eq!(cost.segments[2].title, "2026-05-02 · opus: $2.00");
    }

    #[test]
    fn nothing_to_show_draws_no_bar_and_no_division_by_zero() {
        let chart = stacked("t", "Tokens", &[], Measure::Tokens);
        assert!(chart.segments.is_empty() && chart.legend.is_empty());
        assert_eq!(chart.max, "0 tokens");
        // Tokens of an unpriced model only: bars of no height, no NaN.
        let free = stacked(
            "c",
            "Cost",
            &[row("2026-05-01", "x", 5, 0.0)],
            Measure::Cost,
        );
        assert_eq!(free.segments[0].height, "0.0");
        assert_eq!(free.segments[0].y, "160.0");
    }

    #[test]
    fn figures_read_as_people_write_them() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(dollars(0.0), "$0.00");
        assert_eq!(dollars(0.0421), "$0.042");
        assert_eq!(dollars(12.346), "$12.35");
    }
}
