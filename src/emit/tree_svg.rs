//! `tree.svg`: the decision diagrams of [`super::tree_picture::picture`] drawn as SVG, laid out
//! here rather than by Graphviz.
//!
//! Contract: the same diagrams give the same bytes on every machine (no external program, no
//! font metrics: text widths are estimated per character, coordinates printed to 0.1), so
//! `verify` re-derives the file like any other. Layout is the layered (Sugiyama) scheme:
//! boxes ranked by their longest path from the root; every arrow passes through one slot
//! holding its label in the layer below its source, and a dummy slot in each further layer, so
//! labels and arrows never cross a box; slots ordered by barycentre sweeps (the order with the
//! fewest crossings is kept); each layer's slots placed as near as their neighbours as their
//! separations allow (a weighted isotonic regression, solved exactly by pooling). Several
//! schedules sit side by side, each framed under its heading. The drawing is scaled down to a
//! landscape page (10.5 x 8 inches) where it is larger; its arrows carry the full constraint as
//! a tooltip.
//!
//! Why not Graphviz: `dot` made the picture depend on the installed version, and waiting for
//! its layout was 15-25 ms of a 60 ms `gen` (bench/RESULTS.md).

use super::tree_picture::{heading, BoxKind, Picture};
use std::fmt::Write;

/// Width of a character of box text (10 px monospace) and of label text (9 px sans-serif,
/// an average wide enough for digits and capitals).
const BOX_CHAR: f64 = 6.1;
const LABEL_CHAR: f64 = 5.4;
const BOX_LINE: f64 = 12.0;
const LABEL_LINE: f64 = 11.0;
const BOX_PAD_X: f64 = 6.0;
const BOX_PAD_Y: f64 = 4.0;
const FORK_RADIUS: f64 = 3.0;
/// Horizontal room between neighbouring slots, and vertical room between layers.
const SLOT_GAP: f64 = 12.0;
const LAYER_GAP: f64 = 14.0;
/// Around a schedule's diagram inside its frame, between frames, and the heading's line.
const FRAME_PAD: f64 = 10.0;
const FRAME_GAP: f64 = 16.0;
const HEADING_LINE: f64 = 16.0;
/// The largest drawing, in points: a landscape page.
const PAGE_WIDTH: f64 = 756.0;
const PAGE_HEIGHT: f64 = 576.0;
/// Rounds of barycentre ordering and of placement.
const ORDER_ROUNDS: usize = 8;
const PLACE_ROUNDS: usize = 12;

/// What occupies a slot of a layer.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Slot {
    /// Box `i` of the picture.
    Box(usize),
    /// The label of arrow `a`: the arrow runs down the slot's left side, its text to the right.
    Label(usize),
    /// Arrow `a` passing through a layer.
    Pass(usize),
}

/// One schedule's diagram laid out: every slot's layer, centre x (for a label, where its
/// arrow runs), extents left and right of that x, and height; each arrow's chain of slots.
struct Layout {
    slots: Vec<Slot>,
    layer: Vec<usize>,
    x: Vec<f64>,
    left: Vec<f64>,
    right: Vec<f64>,
    height: Vec<f64>,
    chains: Vec<Vec<usize>>,
    layer_top: Vec<f64>,
    layer_height: Vec<f64>,
    width: f64,
    total_height: f64,
}

fn box_size(p: &Picture, i: usize) -> (f64, f64) {
    let b = &p.boxes[i];
    match b.kind {
        BoxKind::Fork => (2.0 * FORK_RADIUS, 2.0 * FORK_RADIUS),
        _ => {
            let longest = b.lines.iter().map(|l| l.chars().count()).max().unwrap_or(0) as f64;
            (longest * BOX_CHAR + 2.0 * BOX_PAD_X, b.lines.len() as f64 * BOX_LINE + 2.0 * BOX_PAD_Y)
        }
    }
}

/// Each box's rank: its longest path from the root (box 0), so every arrow points down.
fn ranks(p: &Picture) -> Vec<usize> {
    let n = p.boxes.len();
    let mut indegree = vec![0usize; n];
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for a in &p.arrows {
        indegree[a.to] += 1;
        out[a.from].push(a.to);
    }
    let mut rank = vec![0usize; n];
    let mut ready: std::collections::BTreeSet<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    while let Some(i) = ready.pop_first() {
        for &j in &out[i] {
            rank[j] = rank[j].max(rank[i] + 1);
            indegree[j] -= 1;
            if indegree[j] == 0 {
                ready.insert(j);
            }
        }
    }
    rank
}

/// Crossings between the arrows joining layer `l` to `l + 1`, with `pos` each slot's place.
fn crossings(edges: &[(usize, usize)], pos: &[usize]) -> usize {
    let mut pairs: Vec<(usize, usize)> = edges.iter().map(|&(u, v)| (pos[u], pos[v])).collect();
    pairs.sort_unstable();
    let mut count = 0;
    for (k, &(_, b)) in pairs.iter().enumerate() {
        count += pairs[k + 1..].iter().filter(|&&(_, d)| d < b).count();
    }
    count
}

/// Place `order`'s slots at x values as near `want` as separations `gap[k]` (between slot k
/// and k + 1) allow, weighted by `weight`: isotonic regression on `want - offset`, pooled.
fn place(want: &[f64], weight: &[f64], gap: &[f64]) -> Vec<f64> {
    let mut offset = Vec::with_capacity(want.len());
    let mut sum = 0.0;
    for k in 0..want.len() {
        if k > 0 {
            sum += gap[k - 1];
        }
        offset.push(sum);
    }
    // Blocks of (weighted mean, total weight, count), merged while out of order.
    let mut blocks: Vec<(f64, f64, usize)> = Vec::new();
    for k in 0..want.len() {
        let mut block = (want[k] - offset[k], weight[k], 1);
        while let Some(&(mean, w, c)) = blocks.last() {
            if mean <= block.0 {
                break;
            }
            blocks.pop();
            let total = w + block.1;
            block = ((mean * w + block.0 * block.1) / total, total, c + block.2);
        }
        blocks.push(block);
    }
    let mut x = Vec::with_capacity(want.len());
    for (mean, _, c) in blocks {
        for _ in 0..c {
            let k = x.len();
            x.push(mean + offset[k]);
        }
    }
    x
}

fn lay_out(p: &Picture) -> Layout {
    let rank = ranks(p);
    let layers = rank.iter().map(|r| 2 * r + 1).max().unwrap_or(1);
    let mut slots: Vec<Slot> = (0..p.boxes.len()).map(Slot::Box).collect();
    let mut layer: Vec<usize> = rank.iter().map(|r| 2 * r).collect();
    let mut chains = Vec::with_capacity(p.arrows.len());
    for (a, arrow) in p.arrows.iter().enumerate() {
        let mut chain = vec![arrow.from];
        for l in 2 * rank[arrow.from] + 1..2 * rank[arrow.to] {
            slots.push(if chain.len() == 1 { Slot::Label(a) } else { Slot::Pass(a) });
            layer.push(l);
            chain.push(slots.len() - 1);
        }
        chain.push(arrow.to);
        chains.push(chain);
    }
    let n = slots.len();
    let mut down: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut up: Vec<Vec<usize>> = vec![Vec::new(); n];
    for chain in &chains {
        for w in chain.windows(2) {
            down[w[0]].push(w[1]);
            up[w[1]].push(w[0]);
        }
    }
    // First order: where a walk from the root, arrows in order, first reaches each slot.
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); layers.max(1)];
    let mut seen = vec![false; n];
    let mut stack = vec![0usize];
    while let Some(s) = stack.pop() {
        if std::mem::replace(&mut seen[s], true) {
            continue;
        }
        rows[layer[s]].push(s);
        stack.extend(down[s].iter().rev());
    }
    for s in (0..n).filter(|&s| !seen[s]) {
        rows[layer[s]].push(s);
    }
    let mut pos = vec![0usize; n];
    let index = |rows: &Vec<Vec<usize>>, pos: &mut Vec<usize>| {
        for row in rows {
            for (k, &s) in row.iter().enumerate() {
                pos[s] = k;
            }
        }
    };
    index(&rows, &mut pos);
    let between: Vec<Vec<(usize, usize)>> = (0..rows.len()).map(|l| rows[l].iter().flat_map(|&u| down[u].iter().map(move |&v| (u, v))).collect()).collect();
    let total = |pos: &[usize]| between.iter().map(|e| crossings(e, pos)).sum::<usize>();
    let (mut best, mut best_rows) = (total(&pos), rows.clone());
    for round in 0..2 * ORDER_ROUNDS {
        let sweep: Vec<usize> = if round % 2 == 0 { (1..rows.len()).collect() } else { (0..rows.len().saturating_sub(1)).rev().collect() };
        for l in sweep {
            let near = if round % 2 == 0 { &up } else { &down };
            let key: Vec<(f64, usize)> = rows[l].iter().map(|&s| {
                let ns = &near[s];
                (if ns.is_empty() { pos[s] as f64 } else { ns.iter().map(|&t| pos[t] as f64).sum::<f64>() / ns.len() as f64 }, s)
            }).collect();
            let mut sorted = key;
            sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
            rows[l] = sorted.into_iter().map(|(_, s)| s).collect();
            for (k, &s) in rows[l].iter().enumerate() {
                pos[s] = k;
            }
        }
        let now = total(&pos);
        if now < best {
            (best, best_rows) = (now, rows.clone());
        }
    }
    let rows = best_rows;
    index(&rows, &mut pos);

    let (mut left, mut right, mut height) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    for s in 0..n {
        let (l, r, h) = match slots[s] {
            Slot::Box(i) => {
                let (w, h) = box_size(p, i);
                (w / 2.0, w / 2.0, h)
            }
            Slot::Label(a) => (0.0, p.arrows[a].label.chars().count() as f64 * LABEL_CHAR + 6.0, LABEL_LINE),
            Slot::Pass(_) => (0.0, 0.0, 0.0),
        };
        (left[s], right[s], height[s]) = (l, r, h);
    }
    // Arrows pull harder than boxes, so long arrows run straight.
    let weight: Vec<f64> = slots.iter().map(|s| if matches!(s, Slot::Box(_)) { 1.0 } else { 4.0 }).collect();
    let mut x = vec![0.0; n];
    for row in &rows {
        let mut at = 0.0;
        for (k, &s) in row.iter().enumerate() {
            if k > 0 {
                at += right[row[k - 1]] + SLOT_GAP + left[s];
            }
            x[s] = at;
        }
    }
    for round in 0..PLACE_ROUNDS {
        let sweep: Vec<usize> = if round % 2 == 0 { (1..rows.len()).collect() } else { (0..rows.len().saturating_sub(1)).rev().collect() };
        for l in sweep {
            let row = &rows[l];
            let last = round + 1 == PLACE_ROUNDS;
            let want: Vec<f64> = row.iter().map(|&s| {
                let near: Vec<usize> = if last { up[s].iter().chain(&down[s]).copied().collect() } else if round % 2 == 0 { up[s].clone() } else { down[s].clone() };
                if near.is_empty() { x[s] } else { near.iter().map(|&t| x[t]).sum::<f64>() / near.len() as f64 }
            }).collect();
            let w: Vec<f64> = row.iter().map(|&s| weight[s]).collect();
            let gap: Vec<f64> = row.windows(2).map(|p| right[p[0]] + SLOT_GAP + left[p[1]]).collect();
            for (k, v) in place(&want, &w, &gap).into_iter().enumerate() {
                x[row[k]] = v;
            }
        }
    }
    let min = (0..n).map(|s| x[s] - left[s]).fold(f64::INFINITY, f64::min);
    let min = if min.is_finite() { min } else { 0.0 };
    for v in &mut x {
        *v -= min;
    }
    let width = (0..n).map(|s| x[s] + right[s]).fold(0.0, f64::max);
    let mut layer_top = Vec::with_capacity(rows.len());
    let mut layer_height = Vec::with_capacity(rows.len());
    let mut y = 0.0;
    for row in &rows {
        let h = row.iter().map(|&s| height[s]).fold(0.0, f64::max).max(4.0);
        layer_top.push(y);
        layer_height.push(h);
        y += h + LAYER_GAP;
    }
    Layout { slots, layer, x, left, right, height, chains, layer_top, layer_height, width, total_height: (y - LAYER_GAP).max(0.0) }
}

/// Text inside an SVG element or attribute: markup escaped, and characters XML 1.0 forbids
/// (control characters) shown as `?`.
fn xml_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{fffe}' || c == '\u{ffff}' => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// Draw `layout` of `p`, its top left corner at (`dx`, `dy`).
fn draw(p: &Picture, layout: &Layout, dx: f64, dy: f64, out: &mut String) {
    let centre_y = |s: usize| dy + layout.layer_top[layout.layer[s]] + layout.layer_height[layout.layer[s]] / 2.0;
    for (a, chain) in layout.chains.iter().enumerate() {
        let arrow = &p.arrows[a];
        let mut points = Vec::with_capacity(2 * chain.len());
        // An arrow leaves its box straight down to the bottom of the box's layer and enters
        // the next box from the top of that one's layer: it turns only between layers, where
        // no box is.
        let first = chain[0];
        let bottom = |s: usize| dy + layout.layer_top[layout.layer[s]] + layout.layer_height[layout.layer[s]];
        points.push((dx + layout.x[first], centre_y(first) + layout.height[first] / 2.0));
        if bottom(first) > points[0].1 + 0.05 {
            points.push((dx + layout.x[first], bottom(first)));
        }
        for &s in &chain[1..chain.len() - 1] {
            let l = layout.layer[s];
            points.push((dx + layout.x[s], dy + layout.layer_top[l]));
            points.push((dx + layout.x[s], dy + layout.layer_top[l] + layout.layer_height[l]));
        }
        let last = chain[chain.len() - 1];
        let top = dy + layout.layer_top[layout.layer[last]];
        if centre_y(last) - layout.height[last] / 2.0 > top + 0.05 {
            points.push((dx + layout.x[last], top));
        }
        points.push((dx + layout.x[last], centre_y(last) - layout.height[last] / 2.0));
        let path = points.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect::<Vec<_>>().join(" ");
        let _ = write!(out, "<g class=\"arrow\"><title>{}</title><polyline points=\"{path}\" fill=\"none\" stroke=\"transparent\" stroke-width=\"8\"/><polyline points=\"{path}\" fill=\"none\" stroke=\"#333\" marker-end=\"url(#head)\"/>", xml_text(&arrow.tooltip));
        if let Some(&label) = chain.get(1).filter(|&&s| matches!(layout.slots[s], Slot::Label(_))) {
            let _ = write!(out, "<text x=\"{:.1}\" y=\"{:.1}\" class=\"label\">{}</text>", dx + layout.x[label] + 4.0, centre_y(label) + 3.0, xml_text(&arrow.label));
        }
        out.push_str("</g>\n");
    }
    for (s, slot) in layout.slots.iter().enumerate() {
        let Slot::Box(i) = *slot else { continue };
        let b = &p.boxes[i];
        let (cx, cy) = (dx + layout.x[s], centre_y(s));
        match b.kind {
            BoxKind::Fork => {
                let _ = writeln!(out, "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"{FORK_RADIUS:.1}\" fill=\"#333\"/>");
            }
            kind => {
                let (w, h) = (layout.left[s] + layout.right[s], layout.height[s]);
                let fill = if kind == BoxKind::Kernel { "#d8f0d8" } else { "#f0d8d8" };
                let _ = write!(out, "<g class=\"box\"><rect x=\"{:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{fill}\" stroke=\"#333\"/>", cx - w / 2.0, cy - h / 2.0);
                for (k, line) in b.lines.iter().enumerate() {
                    let _ = write!(out, "<text x=\"{cx:.1}\" y=\"{:.1}\" class=\"box\">{}</text>", cy - h / 2.0 + BOX_PAD_Y + (k as f64 + 0.8) * BOX_LINE, xml_text(line));
                }
                out.push_str("</g>\n");
            }
        }
    }
}

/// `tree.svg`: every schedule's diagram, side by side in source order.
pub fn svg(pictures: &[Picture]) -> String {
    let layouts: Vec<Layout> = pictures.iter().map(lay_out).collect();
    let frames: Vec<(f64, f64)> = pictures.iter().zip(&layouts).map(|(p, l)| {
        let heading_width = heading(&p.schedule).chars().count() as f64 * LABEL_CHAR * 11.0 / 9.0;
        (l.width.max(heading_width) + 2.0 * FRAME_PAD, l.total_height + HEADING_LINE + 2.0 * FRAME_PAD)
    }).collect();
    let width = frames.iter().map(|f| f.0).sum::<f64>() + FRAME_GAP * (frames.len() + 1) as f64;
    let height = frames.iter().map(|f| f.1).fold(0.0, f64::max) + 2.0 * FRAME_GAP;
    let scale = (PAGE_WIDTH / width).min(PAGE_HEIGHT / height).min(1.0);
    let mut out = String::new();
    let _ = writeln!(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.1}pt\" height=\"{:.1}pt\" viewBox=\"0 0 {width:.1} {height:.1}\">", width * scale, height * scale);
    out.push_str("<title>metafork decision diagrams</title>\n<defs><marker id=\"head\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#333\"/></marker>\n<style>text.box{font:10px monospace;text-anchor:middle}text.label{font:9px sans-serif}text.heading{font:11px sans-serif}</style></defs>\n");
    let mut at = FRAME_GAP;
    for ((p, l), (w, h)) in pictures.iter().zip(&layouts).zip(&frames) {
        let _ = writeln!(out, "<g class=\"schedule\"><rect x=\"{at:.1}\" y=\"{FRAME_GAP:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"none\" stroke=\"#999\"/><text x=\"{:.1}\" y=\"{:.1}\" class=\"heading\">{}</text>", at + FRAME_PAD, FRAME_GAP + FRAME_PAD + 10.0, xml_text(&heading(&p.schedule)));
        draw(p, l, at + FRAME_PAD + (w - 2.0 * FRAME_PAD - l.width) / 2.0, FRAME_GAP + FRAME_PAD + HEADING_LINE, &mut out);
        out.push_str("</g>\n");
        at += w + FRAME_GAP;
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emit::tree_picture::{Arrow, PictureBox};

    fn kernel(name: &str) -> PictureBox {
        PictureBox { kind: BoxKind::Kernel, lines: vec![name.into(), "32 registers, 0 shared bytes".into()] }
    }

    fn fork() -> PictureBox {
        PictureBox { kind: BoxKind::Fork, lines: Vec::new() }
    }

    fn arrow(from: usize, to: usize, label: &str) -> Arrow {
        Arrow { from, to, label: label.into(), tooltip: format!("{label} (full)") }
    }

    /// Two forks sharing a kernel box (a diagram, not a tree), an arrow spanning two ranks.
    fn diagram() -> Picture {
        Picture {
            schedule: "s<0>&\"q\"".into(),
            boxes: vec![fork(), fork(), kernel("s_leaf3"), kernel("s_leaf<9>"), PictureBox { kind: BoxKind::NoKernel, lines: vec!["no kernel".into(), "(registers too large)".into()] }],
            arrows: vec![arrow(0, 1, "registers <= R"), arrow(0, 2, "registers > R: no unrolling"), arrow(1, 2, "B <= 8"), arrow(1, 3, "B > 8 & x < 1"), arrow(1, 4, "outside")],
        }
    }

    #[test]
    fn slots_of_a_layer_never_overlap_and_arrows_point_down() {
        let p = diagram();
        let l = lay_out(&p);
        for a in 0..l.slots.len() {
            for b in 0..l.slots.len() {
                if a != b && l.layer[a] == l.layer[b] && l.x[a] <= l.x[b] {
                    assert!(l.x[a] + l.right[a] + SLOT_GAP - 1e-6 <= l.x[b] - l.left[b], "slots {a} and {b} overlap");
                }
            }
            assert!(l.x[a] - l.left[a] >= -1e-6 && l.x[a] + l.right[a] <= l.width + 1e-6);
        }
        for chain in &l.chains {
            assert!(chain.windows(2).all(|w| l.layer[w[1]] == l.layer[w[0]] + 1), "each step of an arrow goes one layer down");
            assert!(matches!(l.slots[chain[1]], Slot::Label(_)), "an arrow's first slot is its label");
        }
        // The shared kernel box sits below both forks that reach it.
        assert_eq!(l.layer[2], 4);
    }

    #[test]
    fn the_drawing_is_deterministic_escaped_and_page_sized() {
        let p = diagram();
        let (a, b) = (svg(std::slice::from_ref(&p)), svg(&[p.clone()]));
        assert_eq!(a, b);
        assert!(a.contains("s_leaf&lt;9&gt;") && a.contains("schedule s&lt;0&gt;&amp;&quot;q&quot;"), "{a}");
        assert!(!a.contains("s<0>") && !a.contains("leaf<9>"));
        assert_eq!(a.matches("<title>").count(), 1 + p.arrows.len(), "one tooltip per arrow");
        assert_eq!(a.matches("<g").count(), a.matches("</g>").count());
        assert_eq!(xml_text("a\u{1}b\n"), "a?b?");
        // A long chain of forks is scaled down onto the page.
        let n = 60;
        let long = Picture { schedule: "long".into(), boxes: (0..n).map(|_| fork()).chain([kernel("k")]).collect(), arrows: (0..n).map(|i| arrow(i, i + 1, "registers <= R")).collect() };
        let big = svg(&[long]);
        let attr = |name: &str| -> f64 { big.split(&format!(" {name}=\"")).nth(1).unwrap().split("pt").next().unwrap().parse().unwrap() };
        assert!(attr("width") <= PAGE_WIDTH + 0.05 && attr("height") <= PAGE_HEIGHT + 0.05);
    }

    #[test]
    fn pooling_places_as_near_as_the_gaps_allow() {
        // Both want 0; 10 apart at least: they split the difference.
        assert_eq!(place(&[0.0, 0.0], &[1.0, 1.0], &[10.0]), vec![-5.0, 5.0]);
        // Far enough apart already: each where it wants.
        assert_eq!(place(&[0.0, 50.0], &[1.0, 1.0], &[10.0]), vec![0.0, 50.0]);
        // The heavier one moves less.
        assert_eq!(place(&[0.0, 0.0], &[1.0, 4.0], &[10.0]), vec![-8.0, 2.0]);
    }
}
