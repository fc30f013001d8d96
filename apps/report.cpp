// growformer report: one self-contained HTML page (figures inlined as SVG, no network) of one
// run, of several runs, or of a sweep directory. Figures are drawn by gnuplot (Debian's
// gnuplot-nox) as SVG files, which are kept beside the page.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <optional>
#include <sstream>

#include <growformer/checkpoint.hpp>
#include <growformer/config.hpp>
#include <growformer/run_dir.hpp>
#include <nlohmann/json.hpp>
#include <growformer/run_events.hpp>
#include <growformer/version.hpp>

#include "commands.hpp"
#include "sweep_file.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace gfapp {

namespace {

// A run read back through the core's reader, with the name the report gives it.
struct Run : gf::RunLog {
  std::string dir, name;
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_run(const fs::path& d) { return fs::is_regular_file(d / "metrics.jsonl"); }

Run load_run(const fs::path& d) {
  Run r;
  static_cast<gf::RunLog&>(r) = gf::read_run_log(gf::RunDir(d.string()));
  r.dir = d.string();
  r.name = d.filename().string();
  if (r.name.empty() || r.name == ".")
    r.name = fs::absolute(d).lexically_normal().filename().string();
  return r;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

std::string num(double v, int digits = 4) {
  if (!std::isfinite(v)) return "-";
  char b[40];
  std::snprintf(b, sizeof b, "%.*g", digits, v);
  return b;
}

// The number K of a log line (its step for "step"), NaN when it has none.
double get(const gf::MetricsLine& j, const std::string& k) {
  return k == "step" ? static_cast<double>(j.step) : j.number(k).value_or(NAN);
}
double get(const gf::RunEvent& e, const std::string& k) {
  return k == "step" ? static_cast<double>(e.step) : e.number(k).value_or(NAN);
}
double total(const std::vector<double>& xs) {
  double t = 0;
  for (double x : xs) t += x;
  return t;
}

// A gnuplot string literal.
std::string gq(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

// One figure: named series of (x, y) points drawn by gnuplot into NAME.svg.
struct Series {
  std::string title, style = "lines";  // lines | points-up | points-down | steps | linespoints
  std::vector<std::pair<double, double>> pts;
  bool y2 = false;
};
struct Figure {
  std::string id, title, xlabel, ylabel, y2label;
  std::vector<Series> series;
  bool logy = false, from_zero = false;
  std::vector<std::pair<double, std::string>> hlines;  // y, label
};

class Plotter {
 public:
  Plotter(fs::path out) : out_(std::move(out)) {
    tmp_ = fs::temp_directory_path() / ("growformer-report-" + std::to_string(::getpid()));
    fs::create_directories(tmp_);
  }
  ~Plotter() {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }
  // Draws the figure; returns the SVG text ("" when no series has a point).
  std::string draw(const Figure& f) {
    bool any = false;
    for (auto& s : f.series) any = any || !s.pts.empty();
    if (!any) return "";
    std::ostringstream gp;
    fs::path svg = out_ / (f.id + ".svg");
    gp << "set terminal svg size 620,340 dynamic font 'sans,11' background '#ffffff'\nset "
          "termoption noenhanced\n"
       << "set output " << gq(svg.string()) << "\nset encoding utf8\nset title " << gq(f.title)
       << "\nset xlabel " << gq(f.xlabel) << "\nset ylabel " << gq(f.ylabel)
       << "\nset grid lc rgb '#dddddd'\nset key outside right top samplen 2 font ',9'\n"
       << "set border 3\nset tics nomirror\nset autoscale fix\nset offsets 0, 0, graph 0.05, graph "
          "0.05\n";
    if (f.logy) gp << "set logscale y\n";
    if (f.from_zero) gp << "set yrange [0:*]\n";
    if (!f.y2label.empty())
      gp << "set y2label " << gq(f.y2label) << "\nset y2tics nomirror\nset border 11\n";
    std::vector<std::string> parts;
    size_t k = 0;
    for (auto& s : f.series) {
      if (s.pts.empty()) continue;
      fs::path dat = tmp_ / (f.id + "_" + std::to_string(k++) + ".dat");
      std::ofstream d(dat);
      d.precision(10);
      for (auto& [x, y] : s.pts)
        if (std::isfinite(x) && std::isfinite(y) && (!f.logy || y > 0)) d << x << " " << y << "\n";
      std::string with = s.style == "points-up"     ? "points pt 9 ps 1.3"
                         : s.style == "points-down" ? "points pt 11 ps 1.3"
                         : s.style == "steps"       ? "steps lw 1.5"
                         : s.style == "linespoints" ? "linespoints pt 7 ps 0.5 lw 1.5"
                                                    : "lines lw 1.5";
      parts.push_back(gq(dat.string()) + " using 1:2" + (s.y2 ? " axes x1y2" : "") + " with " +
                      with + " title " + gq(s.title));
    }
    for (auto& [y, label] : f.hlines)
      parts.push_back(num(y, 10) + " with lines dt 2 lc rgb '#888888' title " + gq(label));
    gp << "plot ";
    for (size_t i = 0; i < parts.size(); ++i) gp << (i ? ", \\\n     " : "") << parts[i];
    gp << "\n";
    fs::path script = tmp_ / (f.id + ".gp");
    std::ofstream(script) << gp.str();
    fs::path err = tmp_ / "gnuplot.err";
    std::string cmd = "gnuplot " + gq(script.string()) + " 2> " + gq(err.string());
    int rc = std::system(cmd.c_str());
    if (rc != 0)
      throw gf::RuntimeError("gnuplot failed on figure `" + f.id + "`: " + read_text(err) +
                             "(script " + script.string() + ")");
    std::string text = read_text(svg);
    // inline form: no XML prolog or doctype inside HTML
    size_t at = text.find("<svg");
    if (at != std::string::npos) text = text.substr(at);
    // every figure's element ids get its own prefix: several SVGs share one HTML document
    for (std::string pat : {"id='", "id=\"", "href='#", "href=\"#", "url(#"}) {
      std::string rep = pat + f.id + "-";
      for (size_t p = text.find(pat); p != std::string::npos; p = text.find(pat, p + rep.size()))
        text.replace(p, pat.size(), rep);
    }
    return text;
  }

 private:
  fs::path out_, tmp_;
};

void require_gnuplot() {
  if (std::system("gnuplot --version > /dev/null 2>&1") != 0)
    throw gf::RuntimeError(
        "gnuplot is not installed; the report's figures need it: apt-get install gnuplot-nox");
}

const char* kStyle = R"(<style>
body{font-family:sans-serif;max-width:1320px;margin:1em auto;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
.charts{display:flex;flex-wrap:wrap;gap:8px}figure.chart{margin:0;border:1px solid #e4e4e4}
figure.chart svg{display:block;width:620px;height:340px}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}pre{background:#f7f7f7;padding:.6em;font-size:.8em;max-height:26em;overflow:auto}
.big{font-size:1.1em}#render-check{color:#999;font-size:.8em}
</style>)";

// Counts the charts whose SVG laid out with drawn paths; a browser test reads the result.
const char* kCheckScript = R"(<script>
window.addEventListener('load', function () {
  var figs = document.querySelectorAll('figure.chart'), ok = 0;
  figs.forEach(function (f) {
    var s = f.querySelector('svg'); if (!s) return;
    var r = s.getBoundingClientRect(), drawn = 0;
    s.querySelectorAll('path').forEach(function (p) {
      try { var b = p.getBBox(); if (b.width > 0 || b.height > 0) drawn++; } catch (e) {}
    });
    if (r.width > 100 && r.height > 100 && drawn > 3) ok++;
  });
  var el = document.getElementById('render-check');
  el.textContent = 'charts: ' + figs.length + ', rendered: ' + ok;
  el.setAttribute('data-charts', figs.length); el.setAttribute('data-rendered', ok);
});
</script>)";

// [2.0, 3.0] as "[2, 3]" (SEP ", "), or as "[2,3]" (SEP ",", the log's own spelling).
std::string int_list(const std::vector<double>& a, const char* sep = ", ") {
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? sep : "") + std::to_string(std::llround(a[i]));
  return s + "]";
}

std::string chart(const std::string& svg, const std::string& id) {
  if (svg.empty()) return "";
  return "<figure class=\"chart\" id=\"" + id + "\">" + svg + "</figure>\n";
}

// Series of (X, Y) from log lines (NaN where a line lacks a number).
std::vector<std::pair<double, double>> xy(const std::vector<gf::MetricsLine>& rows, const char* x,
                                          const char* y) {
  std::vector<std::pair<double, double>> p;
  for (auto& j : rows) p.push_back({get(j, x), get(j, y)});
  return p;
}

// Loss, accuracy (with the majority class of the test line), both against wall time, and the
// learning rate.
std::string metric_charts(const Run& r, Plotter& plot, const std::string& prefix, double majority) {
  std::string charts;
  {
    Figure f{prefix + "loss_step", "loss", "step", "cross-entropy"};
    f.series = {{"train", "lines", xy(r.train, "step", "loss")},
                {"val", "linespoints", xy(r.val, "step", "loss")}};
    charts += chart(plot.draw(f), f.id);
  }
  {
    Figure f{prefix + "accuracy_step", "accuracy", "step", "accuracy"};
    f.series = {{"train", "lines", xy(r.train, "step", "accuracy")},
                {"val", "linespoints", xy(r.val, "step", "accuracy")}};
    if (std::isfinite(majority)) f.hlines.push_back({majority, "majority class (test)"});
    charts += chart(plot.draw(f), f.id);
  }
  {
    Figure f{prefix + "wall_time", "loss and accuracy against wall time", "wall time (s)",
             "cross-entropy", "accuracy"};
    Series va{"val accuracy", "linespoints", xy(r.val, "elapsed_s", "accuracy")};
    va.y2 = true;
    f.series = {{"train loss", "lines", xy(r.train, "elapsed_s", "loss")},
                {"val loss", "linespoints", xy(r.val, "elapsed_s", "loss")},
                va};
    charts += chart(plot.draw(f), f.id);
  }
  {
    Figure f{prefix + "lr", "learning rate", "step", "learning rate"};
    f.series = {{"lr", "lines", xy(r.train, "step", "lr")}};
    charts += chart(plot.draw(f), f.id);
  }
  return charts;
}

// The run's structure edits (grow and prune events) in order.
std::vector<const gf::RunEvent*> edits_of(const Run& r) {
  std::vector<const gf::RunEvent*> edits;
  for (auto& e : r.events)
    if (e.event.type == "grow" || e.event.type == "prune") edits.push_back(&e);
  return edits;
}

// Heads per block, with growth and prune markers at (step, heads after the head edit); drawn
// when FULL or when the structure changed.
std::string heads_chart(const Run& r, std::vector<const gf::RunEvent*> edits, Plotter& plot,
                        const std::string& prefix, bool full) {
  edits.erase(std::remove_if(edits.begin(), edits.end(),
                             [](const gf::RunEvent* e) {
                               return e->text("what") == "mlp_units" || e->text("what") == "block";
                             }),
              edits.end());
  size_t blocks = 0;
  for (auto& j : r.train) blocks = std::max(blocks, j.list("heads").size());
  bool structural = !edits.empty();
  for (auto& j : r.train)
    if (!j.list("heads").empty() && j.list("heads") != r.train.front().list("heads"))
      structural = true;
  if (blocks == 0 || !(full || structural)) return "";
  Figure f{prefix + "heads", "heads per block", "step", "heads"};
  f.from_zero = true;
  for (size_t b = 0; b < blocks; ++b) {
    // the logged counts, and each edit's count after it at its own step (a log point may come
    // long after the edit: the line steps where the marker is)
    Series s{"block " + std::to_string(b), "steps"};
    for (auto& j : r.train) {
      std::vector<double> heads = j.list("heads");
      if (heads.size() > b) s.pts.push_back({get(j, "step"), heads[b]});
    }
    for (auto* e : edits) {
      std::vector<double> heads = e->list("heads");
      if (heads.size() > b && std::isfinite(heads[b])) s.pts.push_back({get(*e, "step"), heads[b]});
    }
    std::stable_sort(s.pts.begin(), s.pts.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    f.series.push_back(s);
  }
  Series grow{"growth", "points-up"}, prune{"prune", "points-down"};
  for (auto* e : edits) {
    size_t b = std::max(0L, e->event.block);
    std::vector<double> heads = e->list("heads");
    double after = heads.size() > b ? heads[b] : NAN;
    (e->event.type == "grow" ? grow : prune).pts.push_back({get(*e, "step"), after});
  }
  f.series.push_back(grow);
  f.series.push_back(prune);
  return chart(plot.draw(f), f.id);
}

// Each block's MLP width after each MLP edit (`what: mlp_units`); none when no MLP was edited.
std::string mlp_chart(const std::vector<const gf::RunEvent*>& edits, Plotter& plot,
                      const std::string& prefix) {
  Figure f{prefix + "mlp", "MLP width per block (after each MLP edit)", "step", "units"};
  f.from_zero = true;
  for (auto* e : edits) {
    if (e->text("what") != "mlp_units") continue;
    const std::vector<double> widths = e->list("mlp_widths");
    for (size_t b = 0; b < widths.size(); ++b) {
      if (f.series.size() <= b) f.series.push_back(Series{"block " + std::to_string(b), "steps"});
      f.series[b].pts.push_back({get(*e, "step"), widths[b]});
    }
  }
  return f.series.empty() ? "" : chart(plot.draw(f), f.id);
}

// The number of blocks after each block edit (`what: block`); none when no block was edited.
std::string depth_chart(const std::vector<const gf::RunEvent*>& edits, Plotter& plot,
                        const std::string& prefix) {
  Figure f{prefix + "depth", "Blocks (after each block edit)", "step", "blocks"};
  f.from_zero = true;
  Series s{"blocks", "steps"};
  for (auto* e : edits)
    if (e->text("what") == "block") s.pts.push_back({get(*e, "step"), get(*e, "blocks")});
  if (s.pts.empty()) return "";
  f.series.push_back(s);
  return chart(plot.draw(f), f.id);
}

// INCRT: eigenvalues of the residual directional energy and thresholds, per block.
std::string incrt_charts(const Run& r, Plotter& plot, const std::string& prefix) {
  std::string charts;
  std::map<long, std::vector<const gf::RunEvent*>> checks;
  for (auto& e : r.events)
    if (e.event.type == "check" && e.number("lambda_max"))
      checks[std::max(0L, e.event.block)].push_back(&e);
  for (auto& [b, rows] : checks) {
    Figure f{prefix + "incrt_block" + std::to_string(b),
             "INCRT block " + std::to_string(b) + ": residual energy eigenvalues and thresholds",
             "step", "value (log scale)"};
    f.logy = true;  // unless an eigenvalue estimate is <= 0 (MCA's lambda_min can be)
    for (auto [key, title] : {std::pair{"lambda_max", "lambda_max"},
                              {"lambda_min", "lambda_min"},
                              {"theta_w", "theta_w (growth)"},
                              {"phi_w", "phi_w (minor)"}}) {
      Series s{title, "lines"};
      bool threshold = key[0] != 'l';
      for (auto* e : rows) {
        double y = get(*e, key);
        if (threshold && !(y > 0)) continue;  // thresholds exist once calibrated
        if (!threshold && !(y > 0)) f.logy = false;
        s.pts.push_back({get(*e, "step"), y});
      }
      f.series.push_back(s);
    }
    if (!f.logy) f.ylabel = "value";
    charts += chart(plot.draw(f), f.id);
  }
  return charts;
}

// A policy's own signal: the numbers an event's `plot` string names (`"train_loss waited"`),
// against the step; one figure per policy (the event's `policy`, else its type) and name, one
// line per block (an event without a block: the model). Names joined by commas share a figure
// (`"round_t,z_needed"`: a statistic and the bound it is compared with), one line per name.
std::string signal_charts(const Run& r, Plotter& plot, const std::string& prefix) {
  std::vector<std::string> order;
  std::map<std::string, std::map<std::pair<long, std::string>, Series>> figs;
  for (auto& e : r.events) {
    std::istringstream groups(e.text("plot"));
    std::string who = e.text("policy").empty() ? e.event.type : e.text("policy"), group;
    while (groups >> group) {
      std::istringstream keys(group);
      std::string k;
      const bool joint = group.find(',') != std::string::npos;
      while (std::getline(keys, k, ',')) {
        std::optional<double> v = e.number(k);
        if (!v || !std::isfinite(*v)) continue;
        std::string id = who + ": " + group;
        if (!figs.count(id)) order.push_back(id);
        Series& s = figs[id][{e.event.block, joint ? k : std::string()}];
        if (s.title.empty()) {
          s.title = e.event.block < 0 ? "model" : "block " + std::to_string(e.event.block);
          if (joint) s.title = e.event.block < 0 ? k : s.title + ": " + k;
        }
        s.style = "linespoints";
        s.pts.push_back({get(e, "step"), *v});
      }
    }
  }
  std::string charts;
  for (size_t i = 0; i < order.size(); ++i) {
    const std::string& id = order[i];
    std::string what = id.substr(id.find(':') + 2);
    std::replace(what.begin(), what.end(), ',', ' ');
    Figure f{prefix + "signal_" + gfapp::safe_name(id.substr(0, id.find(':'))) + "_" +
                 gfapp::safe_name(what),
             id.substr(0, id.find(':') + 2) + what, "step", what};
    for (auto& [b, s] : figs[id]) f.series.push_back(s);
    charts += chart(plot.draw(f), f.id);
  }
  return charts;
}

// HKT fusion weights lambda_l per block, and per-head scalars such as beta, over time.
std::string hkt_charts(const Run& r, Plotter& plot, const std::string& prefix) {
  std::string charts;
  std::map<size_t, std::map<size_t, Series>> lambdas;
  std::map<std::string, Series> head_scalars;
  for (auto& j : r.train) {
    double step = get(j, "step");
    for (size_t b = 0; b < j.blocks.size(); ++b) {
      const gf::BlockDiagnostics& bd = j.blocks[b];
      auto lambda = bd.lists.find("lambda");
      if (lambda != bd.lists.end())
        for (size_t l = 0; l < lambda->second.size(); ++l) {
          Series& s = lambdas[b][l];
          s.title = "lambda_" + std::to_string(l) + (l == 0 ? " (finest)" : "");
          s.pts.push_back({step, lambda->second[l]});
        }
      for (auto& [head, scalars] : bd.heads)
        if (scalars.count("beta")) {
          std::string key = "block " + std::to_string(b) + " head " + std::to_string(head);
          Series& s = head_scalars[key];
          s.title = key;
          s.pts.push_back({step, scalars.at("beta")});
        }
    }
  }
  for (auto& [b, levels] : lambdas) {
    Figure f{prefix + "hkt_lambda_block" + std::to_string(b),
             "HKT block " + std::to_string(b) + ": fusion weights lambda_l", "step", "weight"};
    for (auto& [l, s] : levels) f.series.push_back(s);
    charts += chart(plot.draw(f), f.id);
  }
  if (!head_scalars.empty()) {
    Figure f{prefix + "hkt_beta", "hybrid heads: beta (attention vs convolution gate logit)",
             "step", "beta"};
    for (auto& [k, s] : head_scalars) f.series.push_back(s);
    charts += chart(plot.draw(f), f.id);
  }
  return charts;
}

// The final test line against the majority class, or that the run has not finished.
std::string test_paragraph(const Run& r) {
  if (!r.test) return "<p>no final test line (the run has not finished)</p>\n";
  const gf::MetricsLine& t = *r.test;
  std::ostringstream h;
  h << "<p class=\"big\">final test (" << esc(t.text("evaluated_on", "test")) << " split, "
    << esc(t.text("model", "?")) << " model): accuracy <b>" << num(get(t, "accuracy"))
    << "</b> against <b>" << num(get(t, "majority_class_accuracy"))
    << "</b> for the majority class; loss " << num(get(t, "loss")) << " on "
    << std::llround(t.number("examples").value_or(0)) << " examples; heads per block "
    << esc(int_list(t.list("heads"), ",")) << "</p>\n";
  return h.str();
}

// The structure edits with every number they logged ("" without edits).
std::string edits_table(const std::vector<const gf::RunEvent*>& edits) {
  if (edits.empty()) return "";
  std::set<std::string> keys;
  for (auto* e : edits)  // the numbers an edit logged (a non-finite one is logged as null)
    for (auto& [k, v] : e->event.numbers)
      if (std::isfinite(v) && k != "block" && k != "head") keys.insert(k);
  std::ostringstream h;
  h << "<h3>structure edits and their causes</h3>\n<table><tr><th>step</th><th class=l>edit</th>"
       "<th>block</th><th>head</th><th class=l>policy</th><th class=l>heads after</th>";
  for (auto& k : keys) h << "<th>" << esc(k) << "</th>";
  h << "</tr>\n";
  for (auto* e : edits) {
    const std::string what = e->text("what") == "mlp_units" ? " (MLP units)"
                             : e->text("what") == "block"   ? " (block)"
                                                            : "";
    h << "<tr><td>" << e->step << "</td><td class=l>" << esc(e->event.type + what) << "</td><td>"
      << std::max(0L, e->event.block) << "</td><td>" << e->event.head << "</td><td class=l>"
      << esc(e->text("policy")) << "</td><td class=l>" << esc(int_list(e->list("heads")))
      << "</td>";
    for (auto& k : keys) h << "<td>" << (e->number(k) ? num(*e->number(k)) : "") << "</td>";
    h << "</tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

// What the growth rounds were judged on when their window ended and in the review after it
// (round_kept, round_rejected:
// the evidence, share, bound and trend) and what the structure decisions cost (the summary's
// cost.*); "" when the run has neither.
std::string decisions_paragraph(const Run& r) {
  std::ostringstream h;
  auto opt = [](const gf::RunEvent& e, const char* key) {
    return e.number(key) ? num(*e.number(key)) : std::string("-");
  };
  const gf::RunDir dir(r.dir);
  std::error_code ec;
  if (fs::is_regular_file(dir.decision_cost(), ec)) {
    const json c = json::parse(read_text(dir.decision_cost()), nullptr, false);
    auto at = [&](const char* k) { return c.is_object() && c.contains(k) && c[k].is_number(); };
    if (at("decision_share") && at("probe_s") && at("check_s") && at("train_s"))
      h << "<p>structure decisions cost <b>" << num(100.0 * c["decision_share"].get<double>())
        << " %</b> of the training steps' time (validation probes "
        << num(c["probe_s"].get<double>()) << " s, policy checks "
        << num(c["check_s"].get<double>()) << " s, training " << num(c["train_s"].get<double>())
        << " s" << (c.value("from_step", 0L) > 0 ? ", since the resume" : "") << ")</p>\n";
  }
  for (auto& e : r.events) {
    const std::string& type = e.event.type;
    if (type != "round_kept" && type != "round_rejected") continue;
    h << "<p>step " << e.step << ": a round " << (type == "round_kept" ? "kept" : "taken back")
      << (e.text("stage") == "review" ? " in the late review" : " when the growth window ended")
      << ", on the evidence <b>" << esc(e.text("evidence")) << "</b> (share "
      << opt(e, "round_share") << ", its bound " << opt(e, "upper") << " against min_share "
      << opt(e, "min_share") << ", trend t " << opt(e, "trend_t") << ")</p>\n";
  }
  return h.str();
}

// The resolved configuration and the plugin lock.
std::string run_files(const Run& r) {
  std::ostringstream h;
  h << "<h3>resolved configuration</h3><pre>" << esc(r.config) << "</pre>\n";
  h << "<h3>plugins</h3><table><tr><th class=l>plugin</th><th class=l>version</th><th "
       "class=l>library</th>"
       "<th class=l>checksum (FNV-1a 64)</th></tr>\n";
  for (auto& l : r.plugins)
    h << "<tr><td class=l>" << esc(l.plugin) << "</td><td class=l>" << esc(l.version)
      << "</td><td class=l>" << esc(l.path) << "</td><td class=l>" << esc(l.checksum.substr(0, 16))
      << "</td></tr>\n";
  h << "</table>\n";
  return h.str();
}

// One run: its charts, test line and edits, and (FULL) its configuration and plugins.
std::string run_section(const Run& r, Plotter& plot, const std::string& prefix, bool full) {
  double majority = r.test ? get(*r.test, "majority_class_accuracy") : NAN;
  std::vector<const gf::RunEvent*> edits = edits_of(r);
  std::string charts = metric_charts(r, plot, prefix, majority) +
                       heads_chart(r, edits, plot, prefix, full) + mlp_chart(edits, plot, prefix) +
                       depth_chart(edits, plot, prefix) + incrt_charts(r, plot, prefix) +
                       hkt_charts(r, plot, prefix) + signal_charts(r, plot, prefix);
  std::string h = "<div class=\"charts\">\n" + charts + "</div>\n" + test_paragraph(r) +
                  edits_table(edits) + decisions_paragraph(r);
  return full ? h + run_files(r) : h;
}

// The group of a sweep job: its name without the seed suffix.
std::string group_of(const std::string& name) {
  auto at = name.rfind("__seed");
  return at == std::string::npos ? name : name.substr(0, at);
}

std::string mean_sd(const std::vector<double>& v) {
  if (v.empty()) return "-";
  double m = 0;
  for (double x : v) m += x;
  m /= v.size();
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  double sd = v.size() > 1 ? std::sqrt(ss / (v.size() - 1)) : 0.0;
  return num(m) + " &plusmn; " + num(sd, 2);
}

std::string overlay_section(const std::vector<Run>& runs, Plotter& plot) {
  std::ostringstream h;
  std::string charts;
  auto overlay = [&](const std::string& id, const std::string& title, const std::string& ylabel,
                     bool val, const char* key, const char* xkey = "step") {
    Figure f{id, title, std::string(xkey) == "step" ? "step" : "wall time (s, of the last process)",
             ylabel};
    for (auto& r : runs) {
      Series s{r.name, val ? "linespoints" : "lines"};
      for (auto& j : val ? r.val : r.train) {
        double y = std::string(key) == "heads_total" ? total(j.list("heads")) : get(j, key);
        s.pts.push_back({get(j, xkey), y});
      }
      f.series.push_back(s);
    }
    charts += chart(plot.draw(f), id);
  };
  overlay("runs_val_accuracy", "validation accuracy, all runs", "accuracy", true, "accuracy");
  overlay("runs_val_accuracy_time", "validation accuracy against wall time, all runs", "accuracy",
          true, "accuracy", "elapsed_s");
  overlay("runs_train_loss", "training loss, all runs", "cross-entropy", false, "loss");
  overlay("runs_heads", "heads in all blocks, all runs", "heads", false, "heads_total");  // NOLINT
  h << "<div class=\"charts\">\n" << charts << "</div>\n";

  // per group: mean +- sd over seeds
  std::map<std::string, std::vector<const Run*>> groups;
  for (auto& r : runs) groups[group_of(r.name)].push_back(&r);
  h << "<h2>sweep table (mean &plusmn; sd over the runs of each group)</h2>\n<table><tr><th "
       "class=l>group</th>"
       "<th>runs</th><th>test accuracy</th><th>best val accuracy</th><th>final heads</th>"
       "<th>majority class</th></tr>\n";
  for (auto& [g, rs] : groups) {
    std::vector<double> test, best, heads, major;
    for (auto* r : rs) {
      if (r->test) {
        test.push_back(get(*r->test, "accuracy"));
        major.push_back(get(*r->test, "majority_class_accuracy"));
        heads.push_back(total(r->test->list("heads")));
      }
      double b = NAN;
      for (auto& j : r->val)
        b = std::isfinite(b) ? std::max(b, get(j, "accuracy")) : get(j, "accuracy");
      if (std::isfinite(b)) best.push_back(b);
    }
    h << "<tr><td class=l>" << esc(g) << "</td><td>" << rs.size() << "</td><td>" << mean_sd(test)
      << "</td><td>" << mean_sd(best) << "</td><td>" << mean_sd(heads) << "</td><td>"
      << mean_sd(major) << "</td></tr>\n";
  }
  h << "</table>\n<h2>runs</h2>\n<table><tr><th class=l>run</th><th>test accuracy</th>"
       "<th>majority class</th><th>test loss</th><th class=l>heads</th><th>steps</th></tr>\n";
  for (auto& r : runs) {
    h << "<tr><td class=l>" << esc(r.name) << "</td>";
    if (r.test)
      h << "<td>" << num(get(*r.test, "accuracy")) << "</td><td>"
        << num(get(*r.test, "majority_class_accuracy")) << "</td><td>" << num(get(*r.test, "loss"))
        << "</td><td class=l>" << esc(int_list(r.test->list("heads"), ",")) << "</td><td>"
        << r.test->step << "</td>";
    else
      h << "<td colspan=5>not finished</td>";
    h << "</tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

}  // namespace

int cmd_report(const std::vector<std::string>& args) {
  po::options_description o("report options");
  std::vector<std::string> dirs;
  std::string out;
  o.add_options()("dirs", po::value(&dirs)->composing(), "run directories or sweep directories")(
      "out", po::value(&out),
      "output folder (default: RUN_DIR/report for one directory, else ./report)");
  bool help;
  parse("growformer report RUN_DIR... [--out DIR]", o, {{"dirs", -1}}, args, &help);
  if (help) return 0;
  if (dirs.empty())
    throw UsageError(
        "name at least one run directory\nusage: growformer report RUN_DIR... [--out DIR]");

  // runs: a directory with metrics.jsonl, or a sweep directory holding such directories
  std::vector<Run> runs;
  bool sweep = false;
  for (auto& d : dirs) {
    fs::path dp(d);
    if (!fs::exists(dp)) throw gf::ConfigError(d + ": no such run directory");
    if (!fs::is_directory(dp)) throw gf::ConfigError(d + ": not a directory");
    if (is_run(dp)) {
      runs.push_back(load_run(dp));
      continue;
    }
    std::vector<fs::path> inner;
    for (auto& e : fs::directory_iterator(dp))
      if (e.is_directory() && is_run(e.path())) inner.push_back(e.path());
    if (inner.empty())
      throw gf::ConfigError(d +
                            ": neither a run directory (no metrics.jsonl) nor a sweep directory "
                            "(no run directories inside)");
    std::sort(inner.begin(), inner.end());
    for (auto& r : inner) runs.push_back(load_run(r));
    sweep = true;
  }
  require_gnuplot();
  if (out.empty()) out = dirs.size() == 1 ? (fs::path(dirs[0]) / "report").string() : "report";
  fs::path figs = fs::path(out) / "figures";
  fs::create_directories(figs);
  Plotter plot(figs);

  std::ostringstream body;
  std::string title;
  if (runs.size() == 1 && !sweep) {
    title = "growformer run " + runs[0].name;
    body << "<h1>" << esc(title) << "</h1>\n<p>" << esc(fs::absolute(runs[0].dir).string())
         << "</p>\n"
         << run_section(runs[0], plot, "", true);
  } else {
    title = std::string(sweep ? "growformer sweep " : "growformer runs ") +
            (dirs.size() == 1 ? fs::path(dirs[0]).filename().string()
                              : std::to_string(runs.size()) + " runs");
    body << "<h1>" << esc(title) << "</h1>\n<p>" << runs.size() << " runs from";
    for (auto& d : dirs) body << " " << esc(d);
    body << "</p>\n" << overlay_section(runs, plot);
    if (!runs.empty()) {
      body << "<h2>configuration of " << esc(runs[0].name) << "</h2><pre>" << esc(runs[0].config)
           << "</pre>\n";
    }
  }
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" << esc(title)
       << "</title>\n"
       << kStyle << "\n</head><body>\n"
       << body.str()
       << "<p id=\"render-check\"></p>\n<p style=\"color:#999;font-size:.8em\">growformer "
       << GROWFORMER_VERSION << "; figures drawn by gnuplot</p>\n"
       << kCheckScript << "\n</body></html>\n";
  // a temporary beside it, then a rename: a failed write (a full disk) keeps the previous page
  const std::string page = html.str();
  gf::write_file_durably((fs::path(out) / "report.html").string(), {{page.data(), page.size()}});
  size_t n = 0;
  for (auto& e : fs::directory_iterator(figs)) n += e.path().extension() == ".svg";
  std::cout << "report: " << (fs::path(out) / "report.html").string() << " (" << n << " figures in "
            << figs.string() << ")\n";
  return 0;
}

}  // namespace gfapp
