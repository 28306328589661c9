// SPDX-License-Identifier: Apache-2.0
// A small XML well-formedness check for the SVG tests, so that they do not depend on xmllint being installed.
#pragma once

#include <string>
#include <string_view>

namespace joule::viz::test {

/// @return "" if `xml` is well-formed as far as the SVGs joule writes go (an optional <?xml?> prolog, one
/// root element, nested elements with quoted, unique attributes, comments, the five predefined entities and
/// numeric character references), else a description of the first problem with its byte offset.
std::string xml_problem(std::string_view xml);

}  // namespace joule::viz::test
