// A small reader and writer for NCCL's topology XML: elements with attributes,
// no text content. Enough for NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE, and strict:
// a malformed file fails with its name and line.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::topology {

struct XmlElement {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;  // in file order
  std::vector<XmlElement> children;
  int line = 0;  // where the element starts in its source (0: built in memory)

  // The attribute's value, or null when absent.
  const std::string* attr(std::string_view key) const;
  std::string attrOr(std::string_view key, std::string_view fallback) const;
  // Adds the attribute, or replaces its value.
  void set(std::string_view key, std::string value);
  XmlElement& add(std::string childName);

  // Same name, attributes and children (line numbers ignored).
  bool operator==(const XmlElement& o) const;
};

// Parses one document whose root element is returned. `source` names the text
// in errors ("file.xml:12: ..."). Throws Error(ncclInvalidUsage).
XmlElement parseXml(std::string_view text, const std::string& source);
// Two-space indentation, attributes in order, one element per line.
std::string writeXml(const XmlElement& root);

XmlElement loadXmlFile(const std::string& path);
void saveXmlFile(const std::string& path, const XmlElement& root);

}  // namespace strata::topology
