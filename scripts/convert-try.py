#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One-off rewrite of `if (!x) return tl::make_unexpected(x.error());` into JOULE_TRY (issue 13).

    auto x = EXPR;                                 auto x = JOULE_TRY(EXPR);   (uses *x, x-> become x, x.)
    if (!x) {                              →       JOULE_TRY(EXPR);            (x unused afterwards: see --void)
      return tl::make_unexpected(x.error());
    }
    if (auto x = EXPR; !x) { return …x.error()…; }   →   JOULE_TRY(EXPR);

A site whose variable is used afterwards in any other way (x.has_value(), x passed on, reassigned) is left as
it is. Prints what it changed and what it left.
"""
import re
import sys

RET = r'return\s+(?:::)?tl::make_unexpected\(\s*(?:std::move\()?\s*(?:std::move\()?{n}\)?(?:\.error\(\)|\)\.error\(\))\s*\)?\s*\);'


def ret_re(name):
    return re.compile(RET.format(n=re.escape(name)))


DECL = re.compile(r'^(\s*)((?:const\s+)?(?:auto|Result<.*>)\s*&{0,2})\s*(\w+)\s*=\s*(.*)$')


def find_block_end(lines, start):
    """Index of the line that closes the block enclosing `start` (exclusive end of the rest of the block)."""
    depth = 0
    for i in range(start, len(lines)):
        code = strip_strings(lines[i])
        for ch in code:
            if ch == '{':
                depth += 1
            elif ch == '}':
                depth -= 1
                if depth < 0:
                    return i
    return len(lines)


def strip_strings(line):
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(?:\\.|[^'\\])*'", "''", line)
    i = line.find('//')
    return line if i < 0 else line[:i]


def blank_strings(text):
    """The text with the contents of string and character literals and of comments blanked (same length)."""
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', lambda m: '"' + ' ' * (len(m.group(0)) - 2) + '"', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", lambda m: "'" + ' ' * (len(m.group(0)) - 2) + "'", text)
    return re.sub(r'//[^\n]*', lambda m: ' ' * len(m.group(0)), text)


def uses(text, name):
    return [m for m in re.finditer(r'(?<![\w.>])' + re.escape(name) + r'\b', blank_strings(text))]


def rewrite_uses(text, name):
    """Rewrites *name → name, name-> → name., name.value() → name; None if another use remains."""
    n = re.escape(name)
    t = re.sub(r'std::move\(\s*\*' + n + r'\s*\)', 'std::move(' + name + ')', text)
    # x-> first: *x->y is *(x->y), which becomes *x.y, not x.y.
    t = re.sub(r'(?<![\w.>])' + n + r'->', name + '.', t)
    t = re.sub(r'\*' + n + r'\b(?!\s*(?:\(|\.|->|\[))', name, t)  # *x (not *x(…), *x.y, *x->y, *x[i])
    t = re.sub(r'(?<![\w.>])' + n + r'\.value\(\)', name, t)
    # Every remaining use must be a plain value use now; reject forms that only make sense on an expected.
    for bad in (r'\.has_value\(\)', r'\.error\(\)', r'\.value_or\(', r'\.and_then\(', r'\.map\(', r'\.or_else\(',
                r'\.map_error\('):
        if re.search(r'(?<![\w.>])' + n + bad, t):
            return None
    if re.search(r'(?<![\w.>])if\s*\(\s*!?\s*' + n + r'\s*\)', t) or re.search(r'[!]\s*' + n + r'\b', t):
        return None
    if re.search(r'(?<![\w.>])' + n + r'\s*=[^=]', t):  # reassigned
        return None
    # A bare use (passed on as a Result, returned…) is ambiguous: only accept it if the original had none.
    blank = blank_strings(text)
    orig_bare = [m for m in uses(text, name)
                 if not re.match(r'->|\.value\(\)', blank[m.end():m.end() + 8]) and
                 not blank[max(0, m.start() - 1):m.start()] == '*']
    if orig_bare:
        return None
    return t


def convert(path):
    lines = open(path).read().split('\n')
    out_changed = 0
    left = []
    i = 0
    while i < len(lines):
        line = lines[i]
        # Form: if (auto x = EXPR; !x) {  return …;  }
        m = re.match(r'^(\s*)if \((?:const )?auto (\w+) = (.*); !(\w+)\) \{$', line)
        if m and m.group(2) == m.group(4) and i + 2 < len(lines) and ret_re(m.group(2)).search(lines[i + 1]) \
                and lines[i + 2].strip() == '}':
            lines[i:i + 3] = [f'{m.group(1)}JOULE_TRY({m.group(3)});']
            out_changed += 1
            i += 1
            continue
        # Form: if (auto x = EXPR…      (EXPR over several lines)
        #           !x) {  return …;  }
        m = re.match(r'^(\s*)if \((?:const )?auto (\w+) = (.*)$', line)
        if m and not line.rstrip().endswith('{'):
            name, end = m.group(2), None
            for j in range(i + 1, min(i + 12, len(lines))):
                if re.match(r'^\s*!' + re.escape(name) + r'\) \{$', lines[j]):
                    end = j
                    break
            if end is not None and end + 2 < len(lines) and ret_re(name).search(lines[end + 1]) and \
                    lines[end + 2].strip() == '}':
                expr = '\n'.join([m.group(3)] + lines[i + 1:end]).rstrip()
                if expr.endswith(';'):
                    lines[i:end + 3] = f'{m.group(1)}JOULE_TRY({expr[:-1]});'.split('\n')
                    out_changed += 1
                    i += 1
                    continue
        m = re.match(r'^(\s*)if \(!(\w+)\) \{$', line)
        if not (m and i + 2 < len(lines) and ret_re(m.group(2)).search(lines[i + 1]) and lines[i + 2].strip() == '}'):
            i += 1
            continue
        name = m.group(2)
        # Find the declaration: the statement just before, possibly spanning lines.
        j = i - 1
        while j >= 0 and not lines[j].rstrip().endswith(';') and not lines[j].strip().endswith('{') and \
                not lines[j].strip().endswith('}'):
            j -= 1
        # lines[j] ends the previous statement; find its start.
        k = j
        while k > 0 and not DECL.match(lines[k]) and not lines[k - 1].rstrip().endswith((';', '{', '}')):
            k -= 1
        d = DECL.match(lines[k]) if k >= 0 else None
        if not d or d.group(3) != name or j != i - 1:
            left.append((i + 1, name, 'no declaration just before'))
            i += 1
            continue
        indent, decl_type, _, first = d.group(1), d.group(2).strip(), d.group(3), d.group(4)
        stmt = '\n'.join([first] + lines[k + 1:j + 1])
        assert stmt.rstrip().endswith(';')
        expr = stmt.rstrip()[:-1]
        end = find_block_end(lines, i + 3)
        rest = '\n'.join(lines[i + 3:end])
        new_rest = rewrite_uses(rest, name)
        if new_rest is None:
            left.append((i + 1, name, 'used as a Result afterwards'))
            i += 1
            continue
        if decl_type.startswith('Result<'):
            decl_type = 'auto'
        if decl_type.startswith('const Result<'):
            decl_type = 'const auto'
        decl_type = decl_type.replace('&&', '').replace('&', '').strip()
        new_decl = f'{indent}{decl_type} {name} = JOULE_TRY({expr});'
        if not uses(rest, name) and '--void' in sys.argv:
            new_decl = f'{indent}JOULE_TRY({expr});'
        lines[end - (end - (i + 3)):end] = new_rest.split('\n') if rest else lines[i + 3:end]
        lines[k:i + 3] = new_decl.split('\n')
        out_changed += 1
        i = k + 1
    text = '\n'.join(lines)
    if out_changed and '#include "joule/core/error.hpp"' not in text and 'JOULE_TRY' in text:
        pass  # every file using Result already includes it through its headers
    open(path, 'w').write(text)
    return out_changed, left


if __name__ == '__main__':
    total = 0
    for path in [a for a in sys.argv[1:] if not a.startswith('--')]:
        changed, left = convert(path)
        total += changed
        for line, name, why in left:
            print(f'{path}:{line}: left {name}: {why}')
    print(f'converted {total}', file=sys.stderr)
