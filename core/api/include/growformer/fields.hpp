// Options and state declared once. A component lists each option in an `OptionTable` (name,
// the member it is read into, default, help, bounds or choices: the option's type follows the
// member's; a `ConfigNode` member is a component's mapping, an `AnyNode` member any YAML value
// passed on as it is, a `std::optional` member an option that may stay unset) and each state field
// in a `StateFields` (name, member, the state version that added it, and optionally the key it is
// reported under in the component's summary). One entry then gives the OptionSpec, the parsing into
// a settings struct, the settings' summary, and the exact-text save and load of the state
// (`growformer/state_text.hpp`).
#pragma once
#include "growformer/export.hpp"

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/rng.hpp"
#include "growformer/state_text.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// An option's member that takes any YAML value, unchecked (OptType::Any: a mapping handed on to
/// code of another language, say); `node` is invalid when the option is absent and has no
/// default.
struct AnyNode {
  ConfigNode node;
};

namespace fields_detail {

template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
struct is_map : std::false_type {};
template <class K, class V, class C, class A>
struct is_map<std::map<K, V, C, A>> : std::true_type {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
template <class T>
struct is_pair : std::false_type {};
template <class A, class B>
struct is_pair<std::pair<A, B>> : std::true_type {};
/// A struct that lists its own state fields (`static const StateFields<V>& state_fields()`).
template <class V, class = void>
struct has_state_fields : std::false_type {};
template <class V>
struct has_state_fields<V, std::void_t<decltype(V::state_fields())>> : std::true_type {};

/// The option type a member of type M is read as.
template <class M>
constexpr OptType opt_type_of() {
  if constexpr (is_optional<M>::value)
    return opt_type_of<typename M::value_type>();
  else if constexpr (std::is_same_v<M, ConfigNode>)
    return OptType::Component;
  else if constexpr (std::is_same_v<M, AnyNode>)
    return OptType::Any;
  else if constexpr (std::is_same_v<M, bool>)
    return OptType::Bool;
  else if constexpr (std::is_floating_point_v<M>)
    return OptType::Float;
  else if constexpr (std::is_integral_v<M>)
    return OptType::Int;
  else if constexpr (std::is_same_v<M, std::string>)
    return OptType::String;
  else if constexpr (std::is_same_v<M, std::vector<int64_t>>)
    return OptType::IntList;
  else if constexpr (std::is_same_v<M, std::vector<double>>)
    return OptType::FloatList;
  else if constexpr (std::is_same_v<M, std::vector<std::string>>)
    return OptType::StringList;
  else
    static_assert(sizeof(M) == 0, "no option type for this member type");
}

template <class M>
void read_option(const Options& o, const std::string& name, M& out) {
  if constexpr (is_optional<M>::value) {
    typename M::value_type v{};
    read_option(o, name, v);
    out = std::move(v);
  } else if constexpr (std::is_same_v<M, ConfigNode>)
    out = o.get_node(name);
  else if constexpr (std::is_same_v<M, AnyNode>)
    out.node = o.get_node(name);
  else if constexpr (std::is_same_v<M, bool>)
    out = o.get_bool(name);
  else if constexpr (std::is_floating_point_v<M>)
    out = static_cast<M>(o.get_float(name));
  else if constexpr (std::is_integral_v<M>)
    out = static_cast<M>(o.get_int(name));
  else if constexpr (std::is_same_v<M, std::string>)
    out = o.get_string(name);
  else if constexpr (std::is_same_v<M, std::vector<int64_t>>)
    out = o.get_int_list(name);
  else if constexpr (std::is_same_v<M, std::vector<double>>)
    out = o.get_float_list(name);
  else
    out = o.get_string_list(name);
}

template <class M>
std::string show(const M& v) {
  if constexpr (is_optional<M>::value) {
    return v ? show(*v) : "~";
  } else if constexpr (std::is_same_v<M, ConfigNode>) {
    if (!v.valid()) return "~";
    std::string s = v.dump();
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  } else if constexpr (std::is_same_v<M, AnyNode>) {
    return show(v.node);
  } else if constexpr (std::is_same_v<M, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<M, std::string>) {
    return v;
  } else if constexpr (is_vector<M>::value) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + show(v[i]);
    return s + "]";
  } else {
    std::ostringstream os;
    os.precision(17);
    os << v;
    return os.str();
  }
}

/// A state value as text: bools and integers as written by <<, doubles with 17 digits
/// (state::put), containers as their length then their elements, pairs as both, an Rng as its
/// two words, a struct with state_fields() as its fields.
template <class V>
void write(std::ostringstream& os, const V& v) {
  if constexpr (has_state_fields<V>::value) {
    V::state_fields().save(os, v);
  } else if constexpr (std::is_same_v<V, bool>) {
    os << (v ? 1 : 0) << ' ';
  } else if constexpr (std::is_floating_point_v<V>) {
    state::put(os, double(v));
  } else if constexpr (std::is_integral_v<V>) {
    os << v << ' ';
  } else if constexpr (std::is_same_v<V, Rng>) {
    os << v.state() << ' ' << v.increment() << ' ';
  } else if constexpr (is_pair<V>::value) {
    write(os, v.first);
    write(os, v.second);
  } else if constexpr (is_vector<V>::value || is_map<V>::value) {
    os << v.size() << ' ';
    for (const auto& x : v) write(os, x);
  } else {
    static_assert(sizeof(V) == 0, "no state text for this member type");
  }
}

template <class V>
void read(state::Reader& r, V& v) {
  if constexpr (has_state_fields<V>::value) {
    V::state_fields().load(r, v, r.version());
  } else if constexpr (std::is_same_v<V, bool>) {
    v = r.u64() != 0;
  } else if constexpr (std::is_floating_point_v<V>) {
    v = static_cast<V>(r.num());
  } else if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) {
    v = static_cast<V>(r.i64());
  } else if constexpr (std::is_integral_v<V>) {
    v = static_cast<V>(r.u64());
  } else if constexpr (std::is_same_v<V, Rng>) {
    const uint64_t s = r.u64(), inc = r.u64();
    v.restore(s, inc);
  } else if constexpr (is_pair<V>::value) {
    read(r, v.first);
    read(r, v.second);
  } else if constexpr (std::is_same_v<V, std::vector<double>>) {
    v = r.vec();
  } else if constexpr (is_vector<V>::value) {
    const size_t n = r.count();
    v.clear();
    for (size_t i = 0; i < n; ++i) {
      typename V::value_type x{};
      read(r, x);
      v.push_back(std::move(x));
    }
  } else if constexpr (is_map<V>::value) {
    const size_t n = r.count();
    v.clear();
    for (size_t i = 0; i < n; ++i) {
      typename V::key_type k{};
      read(r, k);
      read(r, v[k]);
    }
  } else {
    static_assert(sizeof(V) == 0, "no state text for this member type");
  }
}

}  // namespace fields_detail

/// A component's options, each declared once: the table gives the OptionSpecs (in the order
/// declared), reads an `Options` into a settings struct S, and lists S's values by name. An
/// option with an empty default is required (as make_option).
template <class S>
class OptionTable {
 public:
  static constexpr double inf = std::numeric_limits<double>::infinity();

  /// An option read into S::*member (the option's type follows the member's). An option whose
  /// default is "~" and which the document does not give leaves the member's initial value (a
  /// std::optional member stays empty). The member may be one S inherits (B a base of S).
  template <class M, class B>
  OptionTable& add(std::string name, M B::*member, std::string default_value, std::string doc,
                   double min = -inf, double max = inf) {
    static_assert(std::is_base_of_v<B, S>, "add: the member belongs to no base of the settings");
    return add_ref<M>(
        std::move(name), [member](S& s) -> M& { return s.*member; }, std::move(default_value),
        std::move(doc), min, max);
  }
  /// An option read into a member of a member (S::*outer).*member.
  template <class Sub, class M>
  OptionTable& add(std::string name, Sub S::*outer, M Sub::*member, std::string default_value,
                   std::string doc, double min = -inf, double max = inf) {
    return add_ref<M>(
        std::move(name), [outer, member](S& s) -> M& { return (s.*outer).*member; },
        std::move(default_value), std::move(doc), min, max);
  }
  /// A string option whose choices stand for values of the member (an enum, a bool): the
  /// choices of the spec are the names, in the order given.
  template <class M>
  OptionTable& choice(std::string name, M S::*member, std::string default_value, std::string doc,
                      std::vector<std::pair<std::string, M>> values) {
    return choice_ref<M>(
        std::move(name), [member](S& s) -> M& { return s.*member; }, std::move(default_value),
        std::move(doc), std::move(values));
  }
  /// A choice read into (S::*outer).*member.
  template <class Sub, class M>
  OptionTable& choice(std::string name, Sub S::*outer, M Sub::*member, std::string default_value,
                      std::string doc, std::vector<std::pair<std::string, M>> values) {
    return choice_ref<M>(
        std::move(name), [outer, member](S& s) -> M& { return (s.*outer).*member; },
        std::move(default_value), std::move(doc), std::move(values));
  }
  /// The last option belongs to one mode of its component (OptionSpec::mode).
  OptionTable& mode(std::string m) {
    entries_.back().spec.mode = std::move(m);
    return *this;
  }
  /// Appends another table's options (a set shared by several components) whose settings sit
  /// in S::*part. NAMES picks some of its options, in the order given (each must be one of the
  /// table's), so that a shared option keeps its place among the component's own; empty = all,
  /// in the table's order.
  template <class P>
  OptionTable& include(const OptionTable<P>& other, P S::*part,
                       std::vector<std::string> names = {}) {
    for (const auto* e : other.pick(names))
      entries_.push_back({e->spec,
                          [read = e->read, part](const Options& o, S& s) { read(o, s.*part); },
                          [show = e->show, part](const S& s) { return show(s.*part); }});
    return *this;
  }
  /// Appends the options (all, or NAMES) of a table of P, a base of S: the settings S derives
  /// from.
  template <class P>
  OptionTable& include(const OptionTable<P>& other, std::vector<std::string> names = {}) {
    static_assert(std::is_base_of_v<P, S>, "include(table): the table's settings are no base of S");
    for (const auto* e : other.pick(names))
      entries_.push_back({e->spec,
                          [read = e->read](const Options& o, S& s) { read(o, static_cast<P&>(s)); },
                          [show = e->show](const S& s) { return show(static_cast<const P&>(s)); }});
    return *this;
  }

  OptionSpecs specs() const {
    OptionSpecs out;
    for (const auto& e : entries_) out.push_back(e.spec);
    return out;
  }
  /// The settings the options give (starting from S's initial values).
  S read(const Options& o, S s = S{}) const {
    for (const auto& e : entries_) e.read(o, s);
    return s;
  }
  /// Every option's value in S, by name, in the order declared.
  std::vector<std::pair<std::string, std::string>> summary(const S& s) const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& e : entries_) out.emplace_back(e.spec.name, e.show(s));
    return out;
  }

 private:
  template <class>
  friend class OptionTable;
  struct Entry {
    OptionSpec spec;
    std::function<void(const Options&, S&)> read;
    std::function<std::string(const S&)> show;
  };
  /// The entries named by NAMES (all when empty); an unknown name is a programming error.
  std::vector<const Entry*> pick(const std::vector<std::string>& names) const {
    std::vector<const Entry*> out;
    if (names.empty())
      for (const auto& e : entries_) out.push_back(&e);
    for (const auto& n : names) {
      const Entry* found = nullptr;
      for (const auto& e : entries_)
        if (e.spec.name == n) found = &e;
      if (!found)
        throw std::logic_error("OptionTable::include: the table has no option `" + n + "`");
      out.push_back(found);
    }
    return out;
  }
  template <class M, class Ref>
  OptionTable& choice_ref(std::string name, Ref ref, std::string default_value, std::string doc,
                          std::vector<std::pair<std::string, M>> values) {
    OptionSpec spec{
        std::move(name), OptType::String, std::move(default_value), std::move(doc), -inf, inf, {}};
    for (const auto& v : values) spec.choices.push_back(v.first);
    const std::string key = spec.name;
    entries_.push_back({std::move(spec),
                        [ref, values, key](const Options& o, S& s) {
                          const std::string w = o.get_string(key);
                          for (const auto& v : values)
                            if (v.first == w) ref(s) = v.second;
                        },
                        [ref, values](const S& s) {
                          for (const auto& v : values)
                            if (v.second == ref(const_cast<S&>(s))) return v.first;
                          return std::string("?");
                        }});
    return *this;
  }
  template <class M, class Ref>
  OptionTable& add_ref(std::string name, Ref ref, std::string default_value, std::string doc,
                       double min, double max) {
    OptionSpec spec{std::move(name),
                    fields_detail::opt_type_of<M>(),
                    std::move(default_value),
                    std::move(doc),
                    min,
                    max,
                    {}};
    spec.required = spec.default_value.empty();
    const std::string key = spec.name;
    entries_.push_back({std::move(spec),
                        [ref, key](const Options& o, S& s) {
                          if (o.has_value(key)) fields_detail::read_option(o, key, ref(s));
                        },
                        [ref](const S& s) { return fields_detail::show(ref(const_cast<S&>(s))); }});
    return *this;
  }
  std::vector<Entry> entries_;
};

/// A state struct's fields, each declared once, in the order of the saved text: the table
/// writes and reads them (a field added by a later version of the text is read only from texts
/// of that version on and otherwise keeps its initial value) and reports the ones given a
/// summary key.
template <class T>
class StateFields {
 public:
  /// The field T::*member, present in texts from version SINCE on.
  template <class V>
  StateFields& add(std::string name, V T::*member, int since = 0) {
    return add_ref<V>(
        std::move(name), [member](T& t) -> V& { return t.*member; }, since);
  }
  /// A member of a member: (T::*outer).*member.
  template <class Sub, class V>
  StateFields& add(std::string name, Sub T::*outer, V Sub::*member, int since = 0) {
    return add_ref<V>(
        std::move(name), [outer, member](T& t) -> V& { return (t.*outer).*member; }, since);
  }
  /// A field whose text is written and read by hand (several members interleaved).
  StateFields& custom(std::string name, std::function<void(std::ostringstream&, const T&)> save,
                      std::function<void(state::Reader&, T&)> load, int since = 0) {
    entries_.push_back({std::move(name), since, std::move(save), std::move(load), {}, {}});
    return *this;
  }
  /// A field that texts before version UNTIL hold and later ones do not: read and dropped from
  /// those, never written (its value now lives elsewhere).
  template <class V>
  StateFields& dropped(std::string name, int until) {
    Entry e{std::move(name),
            0,
            [](std::ostringstream&, const T&) {},
            [](state::Reader& r, T&) {
              V v{};
              fields_detail::read(r, v);
            },
            {},
            {}};
    e.until = until;
    entries_.push_back(std::move(e));
    return *this;
  }
  /// The last field is reported under KEY by summary().
  StateFields& report(std::string key) {
    entries_.back().summary_key = std::move(key);
    return *this;
  }

  void save(std::ostringstream& os, const T& t) const {
    for (const auto& e : entries_) e.save(os, t);
  }
  /// T's whole state text, "TAG VERSION <the fields> end" (a policy's save_state()).
  std::string text(const std::string& tag, int version, const T& t) const {
    std::ostringstream os;
    os << tag << ' ' << version << ' ';
    save(os, t);
    os << "end";
    return os.str();
  }
  /// Reads a text() of TAG and VERSION into T (a policy's load_state()); an empty text leaves T
  /// as it is; RuntimeError naming TAG for another tag, version or a text cut short.
  void read_text(const std::string& s, const std::string& tag, int version, T& t) const {
    auto opened = state::Reader::open(s, tag, std::to_string(version));
    if (!opened) return;
    load(*opened, t);
    opened->expect("end");
  }
  /// Reads a text of VERSION into T (fields of later versions keep their values); a negative
  /// VERSION (a reader made without open()) reads every field of the current text.
  void load(state::Reader& r, T& t, int version = -1) const {
    for (const auto& e : entries_) {
      const bool held =
          e.until < 0 ? (version < 0 || version >= e.since) : (version >= 0 && version < e.until);
      if (held) e.load(r, t);
    }
  }
  /// The reported fields' values by their keys.
  std::map<std::string, double> summary(const T& t) const {
    std::map<std::string, double> out;
    for (const auto& e : entries_)
      if (!e.summary_key.empty() && e.value) out[e.summary_key] = e.value(t);
    return out;
  }

 private:
  struct Entry {
    std::string name;
    int since = 0;
    std::function<void(std::ostringstream&, const T&)> save;
    std::function<void(state::Reader&, T&)> load;
    std::string summary_key;
    std::function<double(const T&)> value;
    int until = -1;  // dropped(): held by texts before this version only
  };
  template <class V, class Ref>
  StateFields& add_ref(std::string name, Ref ref, int since) {
    Entry e{std::move(name),
            since,
            [ref](std::ostringstream& os, const T& t) {
              fields_detail::write(os, ref(const_cast<T&>(t)));
            },
            [ref](state::Reader& r, T& t) { fields_detail::read(r, ref(t)); },
            {},
            {}};
    if constexpr (std::is_arithmetic_v<V>)
      e.value = [ref](const T& t) { return static_cast<double>(ref(const_cast<T&>(t))); };
    entries_.push_back(std::move(e));
    return *this;
  }
  std::vector<Entry> entries_;
};

}  // namespace gf

GROWFORMER_API_END
