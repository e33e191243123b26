#include "topology/xml.h"

#include <fstream>
#include <sstream>

#include "base/error.h"

namespace strata::topology {

const std::string* XmlElement::attr(std::string_view key) const {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

std::string XmlElement::attrOr(std::string_view key, std::string_view fallback) const {
  const std::string* v = attr(key);
  return v ? *v : std::string(fallback);
}

void XmlElement::set(std::string_view key, std::string value) {
  for (auto& [k, v] : attrs)
    if (k == key) {
      v = std::move(value);
      return;
    }
  attrs.emplace_back(std::string(key), std::move(value));
}

XmlElement& XmlElement::add(std::string childName) {
  children.emplace_back();
  children.back().name = std::move(childName);
  return children.back();
}

bool XmlElement::operator==(const XmlElement& o) const {
  return name == o.name && attrs == o.attrs && children == o.children;
}

namespace {

// Recursive descent over the text; `line` follows the cursor.
class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  XmlElement document() {
    skipMisc();
    if (at("<?xml")) {
      skipPast("?>", "the XML declaration");
      skipMisc();
    }
    if (pos_ >= s_.size()) error("no root element");
    XmlElement root = element();
    skipMisc();
    if (pos_ < s_.size()) error("content after the root element </%s>", root.name.c_str());
    return root;
  }

 private:
  template <typename... Args>
  [[noreturn]] void error(const char* fmt, Args... args) {
    std::string what = format(fmt, args...);
    fail(ncclInvalidUsage, "topology XML %s:%d: %s", source_.c_str(), line_, what.c_str());
  }
  [[noreturn]] void error(const char* what) { error("%s", what); }

  bool at(std::string_view tok) const { return s_.substr(pos_, tok.size()) == tok; }
  void advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < s_.size(); ++i)
      if (s_[pos_++] == '\n') ++line_;
  }
  void skipSpace() {
    while (pos_ < s_.size() && isspace(static_cast<unsigned char>(s_[pos_]))) advance(1);
  }
  void skipPast(std::string_view end, const char* what) {
    size_t e = s_.find(end, pos_);
    if (e == std::string_view::npos) error("unterminated %s", what);
    advance(e + end.size() - pos_);
  }
  // Whitespace and comments between elements.
  void skipMisc() {
    for (;;) {
      skipSpace();
      if (!at("<!--")) return;
      skipPast("-->", "comment");
    }
  }
  static bool nameChar(char c) { return isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':'; }
  std::string name(const char* what) {
    size_t start = pos_;
    while (pos_ < s_.size() && nameChar(s_[pos_])) ++pos_;
    if (pos_ == start) error("expected %s, found %s", what, describeHere().c_str());
    return std::string(s_.substr(start, pos_ - start));
  }
  std::string describeHere() const {
    if (pos_ >= s_.size()) return "end of file";
    char quoted[4] = {'\'', s_[pos_], '\'', '\0'};
    return quoted;
  }
  std::string value() {
    if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\'')) error("expected a quoted attribute value, found %s", describeHere().c_str());
    char quote = s_[pos_];
    advance(1);
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '<') error("'<' inside an attribute value");
      if (s_[pos_] == '&') {
        out += entity();
        continue;
      }
      out += s_[pos_];
      advance(1);
    }
    if (pos_ >= s_.size()) error("unterminated attribute value");
    advance(1);
    return out;
  }
  char entity() {
    static const std::pair<std::string_view, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    for (const auto& [text, c] : kEntities)
      if (at(text)) {
        advance(text.size());
        return c;
      }
    error("unknown entity at %s", std::string(s_.substr(pos_, 8)).c_str());
  }
  XmlElement element() {
    if (!at("<")) error("expected '<', found %s", describeHere().c_str());
    XmlElement e;
    e.line = line_;
    advance(1);
    e.name = name("an element name");
    for (;;) {
      skipSpace();
      if (at("/>")) {
        advance(2);
        return e;
      }
      if (at(">")) {
        advance(1);
        break;
      }
      std::string key = name("an attribute name or '>'");
      if (e.attr(key)) error("attribute '%s' given twice in <%s>", key.c_str(), e.name.c_str());
      skipSpace();
      if (!at("=")) error("expected '=' after attribute '%s'", key.c_str());
      advance(1);
      skipSpace();
      e.attrs.emplace_back(key, value());
    }
    for (;;) {
      skipMisc();
      if (pos_ >= s_.size()) error("<%s> opened on line %d is never closed", e.name.c_str(), e.line);
      if (at("</")) {
        advance(2);
        std::string closing = name("an element name after '</'");
        if (closing != e.name) error("</%s> closes <%s> opened on line %d", closing.c_str(), e.name.c_str(), e.line);
        skipSpace();
        if (!at(">")) error("expected '>' after </%s", closing.c_str());
        advance(1);
        return e;
      }
      if (!at("<")) error("text content is not part of the topology format (in <%s>)", e.name.c_str());
      e.children.push_back(element());
    }
  }

  std::string_view s_;
  const std::string& source_;
  size_t pos_ = 0;
  int line_ = 1;
};

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

void write(std::ostringstream& os, const XmlElement& e, int depth) {
  os << std::string(2 * depth, ' ') << '<' << e.name;
  for (const auto& [k, v] : e.attrs) os << ' ' << k << "=\"" << escape(v) << '"';
  if (e.children.empty()) {
    os << "/>\n";
    return;
  }
  os << ">\n";
  for (const XmlElement& c : e.children) write(os, c, depth + 1);
  os << std::string(2 * depth, ' ') << "</" << e.name << ">\n";
}

}  // namespace

XmlElement parseXml(std::string_view text, const std::string& source) { return Parser(text, source).document(); }

std::string writeXml(const XmlElement& root) {
  std::ostringstream os;
  write(os, root, 0);
  return os.str();
}

XmlElement loadXmlFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ncclInvalidUsage, "topology XML %s: cannot open it", path.c_str());
  std::stringstream buf;
  buf << in.rdbuf();
  return parseXml(buf.str(), path);
}

void saveXmlFile(const std::string& path, const XmlElement& root) {
  std::ofstream out(path);
  if (!out) fail(ncclSystemError, "topology dump %s: cannot create it", path.c_str());
  out << writeXml(root);
  if (!out.flush()) fail(ncclSystemError, "topology dump %s: write failed", path.c_str());
}

}  // namespace strata::topology
