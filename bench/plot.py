# SPDX-License-Identifier: see repository LICENSE
"""bench/plot.py — the one way the benchmark pages draw their plots.

Every bench/run-* script describes its picture as panels and calls render(),
which writes one gnuplot script (the data inline, as datablocks) and runs
Debian's gnuplot (package gnuplot-nox) with its SVG terminal. The scripts do
not write SVG themselves: hand-written SVG drifted (a bar drawn off the canvas,
a chart without a value axis), gnuplot draws axes, tics and keys the same way
on every page.

Panels:
  Bars   bars in groups (vertical) or one bar per row (horizontal), the figure
         printed at each bar, optional min–max whiskers, a log value axis
  Lines  lines or points (CDFs, curves), log axes where asked
  Boxes  box plots of samples, the median printed next to each box
  Ref    a reference line (horizontal, vertical or y = slope·x) with a key entry

Every panel names its value axes with their unit; a panel without refuses to draw.
Only the Python standard library; gnuplot ≥ 5.2 (datablocks, dash arrays).
"""

import math
import shutil
import subprocess
import sys

FONT = "sans"
INSTALL_HINT = "install it (apt-get install gnuplot-nox)"
DASH = {"solid": "1", "dash": "(8,4)", "longdash": "(14,5)", "dot": "(2,4)", "dashdot": "(10,4,2,4)"}


class PlotError(Exception):
    pass


def check():
    """Exit with a clear message when gnuplot is missing: called before a
    measurement, so that a long run does not end without its plot."""
    if not shutil.which("gnuplot"):
        sys.exit(f"gnuplot not found: {INSTALL_HINT}; the pages' plots are drawn with it")


def q(s):
    """A gnuplot single-quoted string (no escapes inside but '' for ')."""
    return "'" + str(s).replace("'", "''") + "'"


def num(v):
    return repr(float(v)) if v is not None and math.isfinite(v) else "NaN"


class Ref:
    """A reference line. axis "y": horizontal at y = value; "x": vertical at
    x = value; "slope": the line y = value · x. label goes in the key; text,
    if given, is written on the plot next to the line's end."""

    def __init__(self, value, label, color="#c0392b", dash="dash", axis="y", text=None):
        self.value, self.label, self.color, self.dash, self.axis, self.text = value, label, color, dash, axis, text


class Series:
    """One line (or set of points) of a Lines panel."""

    def __init__(self, name, xs, ys, color, dash="solid", width=2, points=False):
        self.name, self.xs, self.ys, self.color = name, list(xs), list(ys), color
        self.dash, self.width, self.points = dash, width, points


class BarSeries:
    """One bar per group; low/high (per group, optional) draw a whisker."""

    def __init__(self, name, values, color, low=None, high=None, colors=None):
        self.name, self.values, self.color, self.low, self.high = name, list(values), color, low, high
        self.colors = colors  # per bar, overriding color (a horizontal chart colours its rows by kind)


class Panel:
    """What every panel has: a title, axis labels with units, a key."""

    def __init__(self, title, xlabel, ylabel, key="top left", refs=()):
        self.title, self.xlabel, self.ylabel, self.key, self.refs = title, xlabel, ylabel, key, list(refs)

    def common(self, g):
        g.cmd("set title " + q(self.title) + f" font '{FONT},14'")
        if self.xlabel:
            g.cmd("set xlabel " + q(self.xlabel))
        if self.ylabel:
            g.cmd("set ylabel " + q(self.ylabel))
        # a key below the plot gets a line of room, else it touches the x axis's label
        g.cmd("set key " + self.key + (" height 1" if "below" in self.key else "") if self.key else "unset key")
        g.cmd("set grid back lc rgb '#e3e3e3' lw 1")
        g.cmd("set border 3 lc rgb '#333333'")
        g.cmd("set tics nomirror out scale 0.6")

    def ref_plots(self, g, span):
        """The reference lines as plot elements (with their key entries).
        span(axis) is the extent of the other axis that a line at a value of
        `axis` crosses. Not arrows: gnuplot's SVG terminal merges consecutive
        arrows of one colour into one path with the first one's dashes."""
        out = []
        for r in self.refs:
            style = f"lc rgb {q(r.color)} dt {DASH[r.dash]} lw 1.5"
            title = f"title {q(r.label)}" if r.label else "notitle"
            if r.axis == "slope":
                out.append(f"{num(r.value)} * x with lines {style} {title}")
                continue
            a, b = span(r.axis)
            pts = [(r.value, a), (r.value, b)] if r.axis == "x" else [(a, r.value), (b, r.value)]
            out.append(f"{g.block(pts)} using 1:2 with lines {style} {title}")
            if r.text and r.axis == "x":
                g.cmd(f"set label {q(r.text)} at first {num(r.value)}, graph 1 center offset 0,0.8 "
                      f"tc rgb {q(r.color)} font '{FONT},10' front")
            elif r.text and r.axis == "y":
                g.cmd(f"set label {q(r.text)} at graph 1, first {num(r.value)} right offset -0.5,0.6 "
                      f"tc rgb {q(r.color)} font '{FONT},10' front")
        return out


class Bars(Panel):
    """Bars: groups along the category axis, one bar per series in each group.

    horizontal: the groups are rows from top to bottom (names on the left).
    fmt formats the figure printed at each bar; logv draws the value axis
    logarithmically (bars then start at its lower end). group_refs: per group,
    a list of Ref drawn as short lines across that group only (axis ignored)."""

    def __init__(self, title, groups, series, *, vlabel, clabel=None, horizontal=False, fmt="{:.0f}",
                 logv=False, group_refs=None, label_rotate=False, **kw):
        super().__init__(title, vlabel if horizontal else clabel, clabel if horizontal else vlabel, **kw)
        if not vlabel:
            raise PlotError(f"panel {title!r}: the value axis needs a label with its unit")
        self.groups, self.series, self.horizontal, self.fmt, self.logv = list(groups), list(series), horizontal, fmt, logv
        self.group_refs, self.label_rotate = group_refs or {}, label_rotate
        for r in self.refs:  # a bar chart's reference is a value: its line crosses the categories
            r.axis = "x" if horizontal else "y"

    def bounds(self):
        vals = [v for s in self.series for v in s.values + (s.high or []) if v is not None]
        vals += [r.value for r in self.refs] + [r.value for rs in self.group_refs.values() for r in rs]
        top = max(vals) * (1.25 if not self.logv else 3)  # room for the figures above the bars
        if not self.logv:
            return 0, top
        low = min(v for s in self.series for v in s.values + (s.low or []) if v is not None and v > 0)
        # a hair below the power of ten: gnuplot drops a tic that rounding puts outside the range
        return 10 ** math.floor(math.log10(low * 0.9)) * 0.999, top

    def draw(self, g):
        self.common(g)
        lo, hi = self.bounds()
        n, m = len(self.groups), len(self.series)
        width = 0.8 / m
        v, c = ("x", "y") if self.horizontal else ("y", "x")
        g.cmd(f"set {v}range [{num(lo)}:{num(hi)}]")
        g.cmd(f"set {c}range [-0.6:{n - 0.4}]")
        g.cmd(f"set grid {'x' if self.horizontal else 'y'}tics no{'y' if self.horizontal else 'x'}tics")
        if self.logv:
            g.cmd(f"set logscale {v}")
            g.cmd(f"set {v}tics (" + ", ".join(f"{q(f'{10 ** e:,}')} {10 ** e}" for e in
                                                range(math.ceil(math.log10(lo)), math.ceil(math.log10(hi)) + 1)) + ")")
        # category positions: group i at i (horizontal: counted from the top)
        pos = (lambda i: n - 1 - i) if self.horizontal else (lambda i: i)
        g.cmd(f"set {c}tics (" + ", ".join(f"{q(name)} {pos(i)}" for i, name in enumerate(self.groups)) + ") scale 0")
        plots = []
        for j, s in enumerate(self.series):
            rows, whiskers = [], []
            for i, val in enumerate(s.values):
                if val is None:
                    continue
                at = pos(i) + (j - (m - 1) / 2) * width * (-1 if self.horizontal else 1)
                col = int((s.colors[i] if s.colors else s.color).lstrip("#"), 16)
                a0, a1 = at - width * 0.45, at + width * 0.45
                rows.append((val, at, lo, val, a0, a1, col) if self.horizontal else (at, val, a0, a1, lo, val, col))
                top = val
                if s.low is not None and s.high is not None and s.low[i] is not None:
                    whiskers.append((s.high[i], at, s.low[i] - s.high[i], 0) if self.horizontal
                                    else (at, s.low[i], 0, s.high[i] - s.low[i]))
                    top = max(val, s.high[i])
                self.value_label(g, self.fmt.format(val), at, top)
            name = g.block(rows)
            plots.append(f"{name} using 1:2:3:4:5:6:7 with boxxyerror fs solid 0.85 noborder lc rgb variable notitle")
            if whiskers:
                plots.append(f"{g.block(whiskers)} using 1:2:3:4 with vectors nohead lw 1.2 lc rgb '#222222' notitle")
            if m > 1 or s.name:
                plots.append(f"NaN with boxes fs solid 0.85 noborder lc rgb {q(s.color)} title {q(s.name)}")
        for i, refs in self.group_refs.items():
            half = 0.8 / 2 + 0.04
            for r in refs:
                a0, a1 = pos(i) - half, pos(i) + half
                pts = [(r.value, a0), (r.value, a1)] if self.horizontal else [(a0, r.value), (a1, r.value)]
                plots.append(f"{g.block(pts)} using 1:2 with lines lc rgb {q(r.color)} dt {DASH[r.dash]} lw 1.5 "
                             + (f"title {q(r.label)}" if r.label else "notitle"))
                if r.text:
                    g.cmd(f"set label {q(r.text)} at first {a1}, first {num(r.value)} left offset 0.3,0 "
                          f"tc rgb {q(r.color)} font '{FONT},10' front")
        g.cmd("set style fill solid 0.85 noborder")
        g.plot(plots + self.ref_plots(g, lambda axis: (-0.6, n - 0.4)))

    def value_label(self, g, text, at, top):
        if self.horizontal:
            g.cmd(f"set label {q(text)} at first {num(top)}, first {at} left offset 0.6,0 font '{FONT},11' front")
        elif self.label_rotate:
            g.cmd(f"set label {q(text)} at first {at}, first {num(top)} left rotate by 90 offset 0,0.5 "
                  f"font '{FONT},10' front")
        else:
            g.cmd(f"set label {q(text)} at first {at}, first {num(top)} center offset 0,0.8 font '{FONT},11' front")


class Lines(Panel):
    """Lines (or points) on numeric axes; logx/logy for log axes."""

    def __init__(self, title, series, *, xlabel, ylabel, logx=False, logy=False, xrange=None, yrange=None, **kw):
        super().__init__(title, xlabel, ylabel, **kw)
        if not xlabel or not ylabel:
            raise PlotError(f"panel {title!r}: both axes need a label with their unit")
        self.series, self.logx, self.logy, self.xrange, self.yrange = list(series), logx, logy, xrange, yrange

    def draw(self, g):
        self.common(g)
        for ax, log, rng in (("x", self.logx, self.xrange), ("y", self.logy, self.yrange)):
            if log:
                g.cmd(f"set logscale {ax}")
            if rng:
                g.cmd(f"set {ax}range [{num(rng[0])}:{num(rng[1])}]")
        for ax, log, rng in (("x", self.logx, self.xrange), ("y", self.logy, self.yrange)):
            if log and rng:  # gnuplot labels only the powers of ten: label 1, 2 and 5 of each decade
                tics = [m * 10 ** e for e in range(math.floor(math.log10(rng[0])), math.ceil(math.log10(rng[1])) + 1)
                        for m in (1, 2, 5) if rng[0] <= m * 10 ** e <= rng[1]]
                g.cmd(f"set {ax}tics (" + ", ".join(f"{q(f'{t:g}')} {t!r}" for t in tics) + ")")
        plots = []
        for s in self.series:
            name = g.block(zip(s.xs, s.ys))
            style = (f"with points pt 7 ps 1.3 lc rgb {q(s.color)}" if s.points else
                     f"with lines lw {s.width} dt {DASH[s.dash]} lc rgb {q(s.color)}")
            plots.append(f"{name} using 1:2 {style} title {q(s.name) if s.name else 'notitle'}".replace(
                "title notitle", "notitle"))
        g.plot(plots + self.ref_plots(g, self.span))

    def span(self, axis):
        rng = self.yrange if axis == "x" else self.xrange
        if not rng:
            raise PlotError(f"panel {self.title!r}: a reference line at a value of {axis} needs the other axis's range")
        return rng


class Boxes(Panel):
    """Box plots: one box of samples per category, a label (the median) printed
    right of each box; vmax cuts the value axis (outliers above it are not drawn)."""

    def __init__(self, title, boxes, *, vlabel, vmax, **kw):
        super().__init__(title, None, vlabel, **kw)
        if not vlabel:
            raise PlotError(f"panel {title!r}: the value axis needs a label with its unit")
        self.boxes, self.vmax = list(boxes), vmax  # boxes: (category, samples, color, label, label_at)

    def draw(self, g):
        self.common(g)
        g.cmd(f"set yrange [0:{num(self.vmax)}]")
        g.cmd(f"set xrange [0.4:{len(self.boxes) + 0.6}]")
        g.cmd("set grid ytics noxtics")
        g.cmd("set style fill solid 0.6 border -1")
        g.cmd("set style boxplot outliers pointtype 7")
        g.cmd("set pointsize 0.45")
        g.cmd("set boxwidth 0.5")
        g.cmd("set xtics (" + ", ".join(f"{q(b[0])} {i + 1}" for i, b in enumerate(self.boxes)) + ") scale 0")
        plots = []
        for i, (_, samples, color, label, label_at) in enumerate(self.boxes):
            for r in self.refs:  # a label on a reference line is unreadable: move it off the line, on its side
                if r.axis == "y" and abs(label_at - r.value) < 0.025 * self.vmax:
                    label_at = r.value + (0.03 if label_at >= r.value else -0.03) * self.vmax
            g.cmd(f"set label {q(label)} at first {i + 1.31}, first {num(label_at)} left font '{FONT},12' front")
            plots.append(f"{g.block((x,) for x in samples)} using ({i + 1}):1 with boxplot lc rgb {q(color)} notitle")
        g.plot(plots + self.ref_plots(g, lambda axis: (0.4, len(self.boxes) + 0.6)))


class Gnuplot:
    """The script being written: datablocks first, then the panels."""

    def __init__(self):
        self.blocks, self.cmds = [], []

    def cmd(self, s):
        self.cmds.append(s)

    def block(self, rows):
        name = f"$d{len(self.blocks)}"
        lines = [" ".join(num(v) for v in row) for row in rows]
        self.blocks.append(f"{name} << EOD\n" + "\n".join(lines) + "\nEOD")
        return name

    def plot(self, elements):
        self.cmds.append("plot " + ", \\\n     ".join(elements))


def render(path, panels, *, width=960, height=540, columns=1, weights=None):
    """Draw the panels into the SVG file at path: in `columns` columns, rows
    filled left to right; weights (one per row) share the height. Raises
    PlotError when gnuplot fails; exits when it is not installed."""
    check()
    rows = math.ceil(len(panels) / columns)
    weights = list(weights or [1] * rows)
    g = Gnuplot()
    # fixed: the SVG states its size (a page's <img> shows it so, scaled down to the page's width if need be)
    head = ["set terminal svg size %d,%d fixed noenhanced font '%s,12' background '#ffffff'" % (width, height, FONT),
            "set encoding utf8", "set output " + q(path), "set multiplot"]
    top = 1.0
    for r in range(rows):
        h = weights[r] / sum(weights)
        top -= h
        for c in range(columns):
            k = r * columns + c
            if k >= len(panels):
                break
            g.cmd("reset")
            g.cmd(f"set origin {c / columns:.4f}, {top:.4f}")
            g.cmd(f"set size {1 / columns:.4f}, {h:.4f}")
            panels[k].draw(g)
    g.cmd("unset multiplot")
    script = "\n".join(head[:3] + g.blocks + head[3:] + g.cmds) + "\n"
    p = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
    if p.returncode != 0 or "warning" in p.stderr.lower():  # a warning is a plot missing something
        raise PlotError(f"gnuplot failed drawing {path} (fix, then rerun the script with --render-only): "
                        f"{p.stderr.strip()[-1500:]}")
    return script
