//! The end of a sweep: counts, timings, and (with `--budget`) the type per tensor that keeps
//! the model under a size while adding the least KL-divergence.

use std::collections::BTreeMap;

use super::rows::Row;

/// One choice for one tensor: its type, its bytes and the KLD it costs (0 for the base).
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub ggml_type: String,
    pub bytes: u64,
    pub kld: f64,
}

/// Lines of the summary of `rows` (every row of the output, resumed ones included).
pub fn summarize(rows: &[Row], base_ppl: Option<f64>) -> Vec<String> {
    let ok: Vec<&Row> = rows.iter().filter(|r| r.ok).collect();
    let failed = rows.len() - ok.len();
    let mut lines = vec![format!(
        "sweep: {} rows: {} ok, {failed} failed",
        rows.len(),
        ok.len()
    )];
    if let Some(p) = base_ppl {
        lines.push(format!("sweep: base PPL = {p:.4}"));
    }
    let rounds: Vec<f64> = ok.iter().map(|r| r.seconds).collect();
    let evals: Vec<f64> = ok.iter().filter_map(|r| r.eval_seconds).collect();
    if let (Some(round), Some(eval)) = (median(&rounds), median(&evals)) {
        lines.push(format!(
            "sweep: median round {round:.3} s, median evaluation {eval:.3} s (round / evaluation = {:.3})",
            round / eval
        ));
    }
    let mut by_kld = ok.clone();
    by_kld.sort_by(|a, b| {
        a.kld
            .unwrap_or(f64::MAX)
            .total_cmp(&b.kld.unwrap_or(f64::MAX))
    });
    for r in by_kld.iter().rev().take(5) {
        lines.push(format!(
            "sweep: most sensitive: {} {}: KLD {:.6} PPL {:.4}",
            r.tensor,
            r.ggml_type,
            r.kld.unwrap_or(f64::NAN),
            r.ppl.unwrap_or(f64::NAN)
        ));
    }
    for r in rows.iter().filter(|r| !r.ok) {
        lines.push(format!(
            "sweep: failed: {} {} ({}): {}",
            r.tensor, r.ggml_type, r.file, r.reason
        ));
    }
    lines
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    })
}

/// Per tensor, the choices the rows offer: the base (`base` gives each swept tensor's type
/// and bytes, KLD 0) and every ok single-tensor row.
pub fn choices(
    rows: &[Row],
    base: &dyn Fn(&str) -> Option<(String, u64)>,
) -> BTreeMap<String, Vec<Choice>> {
    let mut out: BTreeMap<String, Vec<Choice>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.ok && !r.tensor.contains('+')) {
        let (Some(kld), Some((base_type, base_bytes))) = (r.kld, base(&r.tensor)) else {
            continue;
        };
        // A NaN or infinite KLD (a row written before such rows were failed) is no choice.
        if !kld.is_finite() {
            continue;
        }
        let list = out.entry(r.tensor.clone()).or_insert_with(|| {
            vec![Choice {
                ggml_type: base_type,
                bytes: base_bytes,
                kld: 0.0,
            }]
        });
        // Measured KLD against the base can dip below 0 by rounding: clamp.
        let c = Choice {
            ggml_type: r.ggml_type.clone(),
            bytes: r.bytes,
            kld: kld.max(0.0),
        };
        if !list.contains(&c) {
            list.push(c);
        }
    }
    out
}

/// The type per tensor whose bytes sum to at most `budget` with the least summed KLD,
/// greedily: start from each tensor's smallest choice, then take the upgrade that removes
/// the most KLD per added byte while it fits. None when even the smallest choices exceed
/// the budget. (KLDs of separate swaps are treated as additive: an estimate.)
pub fn assign(
    choices: &BTreeMap<String, Vec<Choice>>,
    budget: u64,
) -> Option<Vec<(String, Choice)>> {
    let mut pick: Vec<(&String, &Choice)> = choices
        .iter()
        .map(|(name, list)| {
            let smallest = list
                .iter()
                .min_by(|a, b| a.bytes.cmp(&b.bytes).then(a.kld.total_cmp(&b.kld)))
                .expect("every tensor has its base choice");
            (name, smallest)
        })
        .collect();
    let mut total: u64 = pick.iter().map(|(_, c)| c.bytes).sum();
    if total > budget {
        return None;
    }
    loop {
        let mut best: Option<(usize, &Choice, f64)> = None;
        for (k, (name, cur)) in pick.iter().enumerate() {
            for c in &choices[*name] {
                if c.kld >= cur.kld {
                    continue;
                }
                let extra = c.bytes.saturating_sub(cur.bytes);
                if total - cur.bytes + c.bytes > budget {
                    continue;
                }
                let gain = (cur.kld - c.kld) / (extra.max(1) as f64);
                if best.map_or(true, |b| gain > b.2) {
                    best = Some((k, c, gain));
                }
            }
        }
        let Some((k, c, _)) = best else { break };
        total = total - pick[k].1.bytes + c.bytes;
        pick[k].1 = c;
    }
    Some(
        pick.into_iter()
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect(),
    )
}

/// Parses a size: bytes, or with a K/M/G/T suffix (powers of 1024; `KiB`, `GB` and so on
/// read the same).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (bytes, or a number with K/M/G/T)"))?;
    let mult: u64 = match unit
        .trim()
        .to_ascii_lowercase()
        .trim_end_matches(['b', 'i'])
    {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        "t" => 1 << 40,
        _ => return Err(format!("'{s}': unknown unit '{unit}'")),
    };
    Ok((value * mult as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(t: &str, bytes: u64, kld: f64) -> Choice {
        Choice {
            ggml_type: t.into(),
            bytes,
            kld,
        }
    }

    #[test]
    fn the_budget_goes_where_it_removes_the_most_kld() {
        let mut m = BTreeMap::new();
        m.insert(
            "a".to_string(),
            vec![c("f16", 100, 0.0), c("q8_0", 50, 0.001), c("q4_0", 25, 0.1)],
        );
        m.insert(
            "b".to_string(),
            vec![c("f16", 100, 0.0), c("q8_0", 50, 0.01), c("q4_0", 25, 0.02)],
        );
        // Everything at its smallest: 50 bytes.
        let all_small = assign(&m, 50).unwrap();
        assert_eq!(all_small[0].1.ggml_type, "q4_0");
        assert_eq!(all_small[1].1.ggml_type, "q4_0");
        // 75 bytes: a's q8_0 saves 0.099 for 25 bytes, b's 0.01: a goes up.
        let p = assign(&m, 75).unwrap();
        assert_eq!(
            (p[0].1.ggml_type.as_str(), p[1].1.ggml_type.as_str()),
            ("q8_0", "q4_0")
        );
        // Room for everything: the base.
        let p = assign(&m, 200).unwrap();
        assert!(p.iter().all(|(_, c)| c.ggml_type == "f16"));
        assert!(assign(&m, 49).is_none());
    }

    /// Finding 4 of issue 35: a NaN or infinite KLD (an old output's ok row) is never a choice.
    #[test]
    fn non_finite_klds_are_no_choice() {
        let row = |ty: &str, bytes: u64, kld: f64| Row {
            tensor: "t".into(),
            ggml_type: ty.into(),
            bytes,
            kld: Some(kld),
            ok: true,
            ..Row::default()
        };
        let rows = [
            row("q2_k", 10, f64::NAN),
            row("q3_k", 12, f64::INFINITY),
            row("q4_0", 20, 0.01),
        ];
        let m = choices(&rows, &|_| Some(("f16".to_string(), 100)));
        let types: Vec<&str> = m["t"].iter().map(|c| c.ggml_type.as_str()).collect();
        assert_eq!(types, ["f16", "q4_0"]);
        let p = assign(&m, 50).unwrap();
        assert_eq!(p[0].1.ggml_type, "q4_0");
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("123").unwrap(), 123);
        assert_eq!(parse_size("2K").unwrap(), 2048);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("3 MB").unwrap(), 3 << 20);
        assert!(parse_size("x").is_err());
        assert!(parse_size("3 parsecs").is_err());
    }
}
