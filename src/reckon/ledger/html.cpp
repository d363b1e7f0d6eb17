// `reckon ledger ... --html FILE`: the ledger as one page a person looks at instead of reads. Three
// parts, each drawn from figures the Ledger already holds (nothing is computed here that the text
// and JSON reports do not show): the step's memory timeline stacked by tag with the peak marked,
// the layers on the roofline of the device the step is timed for, and the per-layer table.
// The page is self-contained: inline SVG and CSS, no script, no font or image fetched. Every series
// carries a data-series attribute (tag-activation, roof, layers-predicted, ...) that the browser
// test reads back from the rendered page.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "reckon/ledger/ledger.h"

namespace reckon {

namespace {

std::string esc(std::string_view s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '&': r += "&amp;"; break;
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '"': r += "&quot;"; break;
      default: r += c;
    }
  }
  return r;
}

// The tags bottom-up in the stack (what lives longest first) and their colours.
struct TagStyle {
  Tag tag;
  const char* colour;
};
constexpr TagStyle kStack[] = {{Tag::param, "#4e79a7"},      {Tag::optimizer, "#76b7b2"}, {Tag::grad, "#f28e2b"},
                               {Tag::input, "#9c9c9c"},      {Tag::activation, "#e15759"},
                               {Tag::temporary, "#edc948"}, {Tag::workspace, "#b07aa1"}};

const char* phase_colour(Phase p) {
  switch (p) {
    case Phase::forward: return "#59a14f";
    case Phase::backward: return "#e15759";
    case Phase::recompute: return "#ff9da7";
    case Phase::optimizer: return "#4e79a7";
  }
  return "#999";
}

int64_t total(const LedgerMemSample& s) {
  int64_t t = 0;
  for (int64_t b : s.live_bytes) t += b;
  return t;
}

// A round step for about n ticks over [0, hi].
double nice_step(double hi, int n) {
  const double raw = hi / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

constexpr double kW = 960, kH = 380, kL = 80, kR = 24, kT = 24, kB = 64;

std::string memory_svg(const Ledger& l) {
  const auto& tl = l.timeline;
  std::string o = fmt::format(R"(<svg id="memory" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" )"
                              R"(viewBox="0 0 {} {}" role="img" aria-label="memory timeline">)",
                              kW, kH, kW, kH);
  if (tl.empty()) return o + "<text x=\"20\" y=\"40\">no op was recorded</text></svg>";
  // At most one column per pixel: each keeps the sample of its bucket with the most bytes live,
  // so the drawn maximum is the timeline's.
  const size_t n = tl.size(), cols = std::min<size_t>(n, size_t(kW - kL - kR));
  std::vector<size_t> pick(cols);
  for (size_t c = 0; c < cols; ++c) {
    const size_t a = c * n / cols, b = std::max(a + 1, (c + 1) * n / cols);
    size_t best = a;
    for (size_t i = a; i < b; ++i)
      if (total(tl[i]) > total(tl[best])) best = i;
    pick[c] = best;
  }
  size_t peak_i = 0;
  for (size_t i = 0; i < n; ++i)
    if (total(tl[i]) > total(tl[peak_i])) peak_i = i;
  const double mib = double(1 << 20);
  const double top = 1.08 * double(std::max(l.memory.peak_bytes, total(tl[peak_i]))) / mib;
  const double ymax = top > 0 ? top : 1;
  auto X = [&](size_t i) { return kL + (n > 1 ? double(i) / double(n - 1) : 0.5) * (kW - kL - kR); };
  auto Y = [&](double m) { return kH - kB - m / ymax * (kH - kT - kB); };

  // Axes and grid.
  const double step = nice_step(ymax, 5);
  for (double v = 0; v <= ymax + 1e-9; v += step)
    o += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#ddd"/>)"
                     R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end" class="tick">{:g}</text>)",
                     kL, kW - kR, Y(v), Y(v), kL - 6, Y(v) + 4, v);
  o += fmt::format(R"(<text x="16" y="{:.1f}" transform='rotate(-90 16 {:.1f})' text-anchor="middle">MiB live</text>)",
                   (kH - kB + kT) / 2, (kH - kB + kT) / 2);
  o += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">op calls of one step ({} in all)</text>)",
                   (kL + kW - kR) / 2, kH - 8, n);

  // The stack: each tag a band between the running sum below it and the sum with it.
  std::vector<double> below(cols, 0.0);
  for (const TagStyle& ts : kStack) {
    std::vector<double> above(cols);
    for (size_t c = 0; c < cols; ++c) above[c] = below[c] + double(tl[pick[c]].live_bytes[size_t(ts.tag)]) / mib;
    std::string pts;
    for (size_t c = 0; c < cols; ++c) pts += fmt::format("{:.1f},{:.1f} ", X(pick[c]), Y(above[c]));
    for (size_t c = cols; c-- > 0;) pts += fmt::format("{:.1f},{:.1f} ", X(pick[c]), Y(below[c]));
    o += fmt::format(R"(<polygon data-series="tag-{}" fill="{}" fill-opacity="0.85" stroke="none" points="{}">)"
                     R"(<title>{}: {} at the peak</title></polygon>)",
                     tag_name(ts.tag), ts.colour, pts, tag_name(ts.tag),
                     format_bytes(l.memory.at_peak_bytes[size_t(ts.tag)]));
    below = std::move(above);
  }

  // The phases as a band under the plot.
  size_t run0 = 0;
  for (size_t i = 1; i <= n; ++i) {
    if (i < n && tl[i].phase == tl[run0].phase) continue;
    const double x0 = X(run0), x1 = i < n ? X(i) : X(n - 1) + 1;
    o += fmt::format(R"(<rect data-series="phase-{}" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="8" fill="{}">)"
                     R"(<title>{}: op calls {} to {}</title></rect>)",
                     phase_name(tl[run0].phase), x0, kH - kB + 6, std::max(1.0, x1 - x0), phase_colour(tl[run0].phase),
                     phase_name(tl[run0].phase), run0, i - 1);
    if (x1 - x0 > 60)
      o += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" class="tick">{}</text>)", (x0 + x1) / 2,
                       kH - kB + 28, phase_name(tl[run0].phase));
    run0 = i;
  }

  // The peak: the ledger's (exact, possibly inside a kernel) and the op call after which the most was live.
  const double peak_mib = double(l.memory.peak_bytes) / mib, px = X(peak_i);
  o += fmt::format(R"(<g data-series="peak"><line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#000" )"
                   R"(stroke-dasharray="5 3"/><line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#000" )"
                   R"(stroke-dasharray="2 3"/><circle cx="{:.1f}" cy="{:.1f}" r="4" fill="#000"/>)",
                   kL, kW - kR, Y(peak_mib), Y(peak_mib), px, px, kT, kH - kB, px,
                   Y(double(total(tl[peak_i])) / mib));
  const bool right = px > (kL + kW - kR) / 2;
  o += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="{}" class="label">peak {} ({}, after op call {})</text></g>)",
                   right ? px - 8 : px + 8, Y(peak_mib) - 6, right ? "end" : "start", format_mib(l.memory.peak_bytes),
                   phase_name(tl[peak_i].phase), peak_i);
  return o + "</svg>";
}

// Log-scale helpers for the roofline.
double decade_floor(double v) { return std::pow(10.0, std::floor(std::log10(v))); }
double decade_ceil(double v) { return std::pow(10.0, std::ceil(std::log10(v))); }

std::string roofline_svg(const Ledger& l) {
  std::string o = fmt::format(R"(<svg id="roofline" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" )"
                              R"(viewBox="0 0 {} {}" role="img" aria-label="roofline">)",
                              kW, kH + 40, kW, kH + 40);
  if (l.times.empty()) return o + "</svg>";
  const LedgerTime& d = l.times.front();
  const double peak = d.peak_flops, bw = d.device.bandwidth_bytes;
  const bool measured_here = l.measured.ran && d.device.name == "cpu";
  struct Pt {
    const LedgerRow* row;
    double x, y, ym;  // FLOPs/byte, predicted FLOP/s, measured FLOP/s (0: none)
  };
  std::vector<Pt> pts;
  for (const LedgerRow& r : l.rows) {
    const double flops = double(r.fwd_flops + r.bwd_flops);
    if (flops <= 0 || r.bytes_moved <= 0 || r.time_s <= 0) continue;
    pts.push_back({&r, r.intensity, flops / r.time_s, measured_here && r.measured_s > 0 ? flops / r.measured_s : 0});
  }
  if (pts.empty() || peak <= 0 || bw <= 0) return o + "<text x=\"20\" y=\"40\">no layer to place</text></svg>";
  double xlo = d.ridge, xhi = d.ridge, ylo = peak, yhi = peak;
  for (const Pt& p : pts) {
    xlo = std::min(xlo, p.x), xhi = std::max(xhi, p.x);
    ylo = std::min(ylo, p.y), yhi = std::max(yhi, p.y);
    if (p.ym > 0) ylo = std::min(ylo, p.ym), yhi = std::max(yhi, p.ym);
  }
  xlo = decade_floor(xlo), xhi = decade_ceil(xhi * 1.01), ylo = decade_floor(ylo), yhi = decade_ceil(yhi * 1.01);
  const double H = kH;
  auto X = [&](double v) { return kL + (std::log10(v) - std::log10(xlo)) / (std::log10(xhi) - std::log10(xlo)) * (kW - kL - kR); };
  auto Y = [&](double v) { return H - kB - (std::log10(v) - std::log10(ylo)) / (std::log10(yhi) - std::log10(ylo)) * (H - kT - kB); };
  for (double v = xlo; v <= xhi * 1.0001; v *= 10)
    o += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#ddd"/>)"
                     R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" class="tick">{:g}</text>)",
                     X(v), X(v), kT, H - kB, X(v), H - kB + 16, v);
  for (double v = ylo; v <= yhi * 1.0001; v *= 10)
    o += fmt::format(R"(<line x1="{:.1f}" x2="{:.1f}" y1="{:.1f}" y2="{:.1f}" stroke="#ddd"/>)"
                     R"(<text x="{:.1f}" y="{:.1f}" text-anchor="end" class="tick">{}FLOP/s</text>)",
                     kL, kW - kR, Y(v), Y(v), kL - 6, Y(v) + 4, format_si(v));
  o += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" text-anchor="middle">arithmetic intensity, FLOPs per byte moved</text>)",
                   (kL + kW - kR) / 2, H - kB + 40);
  // The roof: bandwidth x intensity up to the ridge, then the peak.
  const double x0 = std::max(xlo, ylo / bw);
  o += fmt::format(R"(<polyline data-series="roof" fill="none" stroke="#333" stroke-width="2" points="{:.1f},{:.1f} )"
                   R"({:.1f},{:.1f} {:.1f},{:.1f}"><title>{}: {}FLOP/s {} peak, {}B/s</title></polyline>)",
                   X(x0), Y(bw * x0), X(d.ridge), Y(peak), X(xhi), Y(peak), esc(d.device.description),
                   format_si(peak), d.precision, format_si(bw));
  o += fmt::format(R"(<text x="{:.1f}" y="{:.1f}" class="label">{} {} peak {}FLOP/s; ridge at {:.1f} FLOPs/byte</text>)",
                   X(d.ridge) + 6, Y(peak) - 8, esc(d.device.name), d.precision, format_si(peak), d.ridge);
  if (measured_here) {
    o += "<g data-series=\"layers-measured-link\">";
    for (const Pt& p : pts)
      if (p.ym > 0)
        o += fmt::format(R"(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#999" stroke-width="1"/>)",
                         X(p.x), Y(p.y), X(p.x), Y(p.ym));
    o += "</g><g data-series=\"layers-measured\">";
    for (const Pt& p : pts)
      if (p.ym > 0)
        o += fmt::format(R"(<rect x="{:.1f}" y="{:.1f}" width="7" height="7" fill="#f28e2b" data-layer="{}">)"
                         R"(<title>{} measured: {}FLOP/s ({:.3f} ms)</title></rect>)",
                         X(p.x) - 3.5, Y(p.ym) - 3.5, esc(p.row->scope), esc(p.row->scope), format_si(p.ym),
                         1e3 * p.row->measured_s);
    o += "</g>";
  }
  o += "<g data-series=\"layers-predicted\">";
  for (const Pt& p : pts)
    o += fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="4" fill="{}" data-layer="{}"><title>{} ({}): )"
                     R"({:.2f} FLOPs/byte, {}FLOP/s predicted, {:.3f} ms, {}-bound</title></circle>)",
                     X(p.x), Y(p.y), p.row->compute_bound ? "#4e79a7" : "#e15759", esc(p.row->scope),
                     esc(p.row->scope), esc(p.row->type), p.x, format_si(p.y), 1e3 * p.row->time_s,
                     p.row->compute_bound ? "compute" : "memory");
  o += "</g>";
  return o + "</svg>";
}

std::string legend(const Ledger& l) {
  std::string o = "<p class=\"legend\">";
  for (const TagStyle& ts : kStack)
    o += fmt::format(R"(<span><i style="background:{}"></i>{} {}</span>)", ts.colour, tag_name(ts.tag),
                     format_bytes(l.memory.at_peak_bytes[size_t(ts.tag)]));
  return o + " <small>(at the peak)</small></p>";
}

std::string table(const Ledger& l) {
  const std::string dev = l.times.empty() ? "" : l.times.front().device.name;
  const bool measured = l.measured.ran, cpu_column = measured && dev != "cpu";  // the cpu's own, beside
  std::string o =
      "<table id=\"layers\"><thead><tr><th>layer</th><th>type</th><th>output</th><th>params</th><th>fwd MACs</th>"
      "<th>bwd MACs</th><th>saved</th><th>FLOPs/byte</th><th>bound</th>";
  o += fmt::format("<th>{} ms predicted</th>", esc(dev));
  if (cpu_column) o += "<th>cpu ms predicted</th>";
  if (measured) o += "<th>cpu ms measured</th>";
  o += "</tr></thead><tbody>";
  for (const LedgerRow& r : l.rows) {
    o += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2f}</td>"
                     "<td>{}</td><td>{:.3f}</td>",
                     esc(r.scope), esc(r.type), r.out_shape.empty() ? "" : shape_str(r.out_shape), format_count(r.params),
                     format_si(double(r.fwd_macs)), format_si(double(r.bwd_macs)), format_bytes(r.saved_bytes),
                     r.intensity, r.compute_bound ? "compute" : "memory", 1e3 * r.time_s);
    if (cpu_column) o += fmt::format("<td>{:.3f}</td>", 1e3 * r.cpu_time_s);
    if (measured) o += r.measured_s >= 0 ? fmt::format("<td>{:.3f}</td>", 1e3 * r.measured_s) : "<td></td>";
    o += "</tr>";
  }
  return o + "</tbody></table>";
}

}  // namespace

std::string ledger_html(const Ledger& l) {
  const LedgerTotals& t = l.totals;
  std::string o = R"(<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">)";
  o += fmt::format("<title>reckon ledger: {}</title>", esc(l.model));
  o += R"(<style>body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:16px;)"
       R"(margin-top:28px}svg{display:block;background:#fff}svg text{font:11px sans-serif;fill:#333}svg .label{font-weight:)"
       R"(bold}table{border-collapse:collapse;font-size:12px}td,th{border-bottom:1px solid #ddd;padding:2px 8px;text-align:)"
       R"(right;white-space:nowrap}td:first-child,td:nth-child(2),th:first-child,th:nth-child(2){text-align:left}.legend span{margin-right:14px;white-space:nowrap}.legend i{)"
       R"(display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}dl{display:grid;grid-template-)"
       R"(columns:max-content auto;gap:2px 14px}dt{color:#666}dd{margin:0}</style></head><body>)";
  o += fmt::format("<h1>{}: one training step, batch {}</h1>", esc(l.model), l.config.batch);
  o += "<dl>";
  auto item = [&](const std::string& k, const std::string& v) { o += fmt::format("<dt>{}</dt><dd>{}</dd>", k, esc(v)); };
  item("model", l.model + (l.model_type.empty() || l.model_type == l.model ? "" : " (" + l.model_type + ")"));
  item("input", shape_str(l.input_shape));
  item("precision, optimizer",
       fmt::format("{}, {}; micro-batch x accumulation {} x {}{}", l.config.precision, l.config.optimizer,
                   l.input_shape.empty() ? 0 : l.input_shape[0], l.config.accum, l.config.recompute ? ", recompute" : ""));
  item("parameters", format_count(t.params));
  item("MACs per image (forward)", format_si(t.per_image(t.fwd_macs)));
  item("peak memory (predicted)", format_mib(l.memory.peak_bytes));
  if (!l.times.empty())
    item("step time (predicted)", fmt::format("{:.2f} ms on {}", 1e3 * l.times.front().step_s,
                                              l.times.front().device.description));
  if (l.measured.ran)
    item("step time (measured on this cpu)",
         fmt::format("{:.2f} ms; tracked peak {}", 1e3 * l.measured.step_s, format_mib(l.measured.memory.peak_bytes)));
  o += "</dl>";
  o += "<h2>Memory through the step, by tag</h2>" + legend(l) + memory_svg(l);
  o += "<h2>The layers on the roofline</h2><p>Each point is a layer's forward and backward: FLOPs over bytes moved, "
       "and the FLOP/s its predicted time gives (blue: compute-bound, red: memory-bound";
  o += l.measured.ran && !l.times.empty() && l.times.front().device.name == "cpu"
           ? "; orange squares: measured on this cpu)"
           : ")";
  o += ".</p>" + roofline_svg(l);
  o += "<h2>Per layer</h2>" + table(l);
  o += "<p><small>Written by reckon ledger. Every figure is the ledger's own (the text and JSON reports show the "
       "same).</small></p></body></html>\n";
  return o;
}

}  // namespace reckon
