# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Set keys of one TOML table in place, leaving every other line of the file as it was.

This is not a TOML round-trip (no parser/writer pair that would drop comments or reorder the
file). It scans the document into statements (table headers, key/value statements spanning
one or more lines, comments) precisely enough to know which lines belong to which table, then
edits only the lines of the keys it is asked to set, or appends the table when it is missing.

Tables defined in ways this line editor cannot update safely (dotted keys, inline tables, array
of tables on the path) raise TomlMergeError instead of producing a duplicate definition.
Pure logic, no Ansible import; runs on Python 3.8+.
"""

from __future__ import absolute_import, division, print_function


import json
import math
import re

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
INTEGER = re.compile(r"^[+-]?(0|[1-9](_?[0-9])*)$")
FLOAT = re.compile(r"^[+-]?(0|[1-9](_?[0-9])*)(\.[0-9](_?[0-9])*)?([eE][+-]?[0-9](_?[0-9])*)?$")


class TomlMergeError(Exception):
    pass


# ---------------------------------------------------------------- scanning


def parse_key(text, pos, lineno):
    """Parse a (dotted) key starting at text[pos]; return (parts, position after the key)."""
    parts = []
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos >= len(text):
            raise TomlMergeError("line %d: key expected" % lineno)
        char = text[pos]
        if char == '"':
            end = pos + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                raise TomlMergeError("line %d: unterminated quoted key" % lineno)
            parts.append(_decode_basic(text[pos:end + 1], lineno))
            pos = end + 1
        elif char == "'":
            end = text.find("'", pos + 1)
            if end < 0:
                raise TomlMergeError("line %d: unterminated quoted key" % lineno)
            parts.append(text[pos + 1:end])
            pos = end + 1
        else:
            match = BARE_KEY.match(text, pos)
            if not match:
                raise TomlMergeError("line %d: invalid key near %r" % (lineno, text[pos:pos + 20]))
            parts.append(match.group(0))
            pos = match.end()
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == ".":
            pos += 1
            continue
        return parts, pos


def _decode_basic(quoted, lineno):
    try:
        return json.loads(quoted)
    except ValueError:
        raise TomlMergeError("line %d: unsupported escape in %s" % (lineno, quoted))


def _value_end(lines, index, pos):
    """Find where a value starting at lines[index][pos] ends.

    Returns (end line index, exclusive; text of the value on its first line without the
    comment, or None when the value spans several lines; the trailing comment of a one-line
    value, '' when none).
    """
    depth = 0
    state = None  # None, '"', "'", '"""', "'''"
    line_no = index
    start_line = index
    col = pos
    while line_no < len(lines):
        text = lines[line_no]
        comment_at = None
        while col < len(text):
            if state is None:
                if text.startswith('"""', col) or text.startswith("'''", col):
                    state = text[col:col + 3]
                    col += 3
                    continue
                char = text[col]
                if char in "\"'":
                    state = char
                elif char in "[{":
                    depth += 1
                elif char in "]}":
                    depth -= 1
                elif char == "#":
                    comment_at = col
                    break
                col += 1
            else:
                if state in ('"', '"""'):
                    if text[col] == "\\":
                        col += 2
                        continue
                if text.startswith(state, col):
                    if len(state) == 3:
                        # a multi-line string may end in one or two quotes right before its closing
                        # delimiter (TOML 1.0): the whole run of quotes closes it
                        while col < len(text) and text[col] == state[0]:
                            col += 1
                    else:
                        col += 1
                    state = None
                    continue
                col += 1
        if state in ('"', "'"):
            raise TomlMergeError("line %d: unterminated string" % (line_no + 1))
        if state is None and depth <= 0:
            if line_no == start_line:
                value = text[pos:comment_at].strip() if comment_at is not None else text[pos:].strip()
                comment = text[comment_at:].rstrip("\r\n") if comment_at is not None else ""
                return line_no + 1, value, comment
            return line_no + 1, None, ""
        line_no += 1
        col = 0
    raise TomlMergeError("line %d: value never ends" % (index + 1))


def scan(lines):
    """Split the document into statements: dicts with kind, start, end and table/key paths."""
    statements = []
    table = []
    index = 0
    while index < len(lines):
        raw = lines[index]
        stripped = raw.strip()
        lineno = index + 1
        if not stripped or stripped.startswith("#"):
            index += 1
            continue
        indent = raw[:len(raw) - len(raw.lstrip())]
        if stripped.startswith("["):
            array = stripped.startswith("[[")
            opening = 2 if array else 1
            path, after = parse_key(stripped, opening, lineno)
            closing = "]]" if array else "]"
            if not stripped.startswith(closing, after):
                raise TomlMergeError("line %d: malformed table header" % lineno)
            rest = stripped[after + len(closing):].strip()
            if rest and not rest.startswith("#"):
                raise TomlMergeError("line %d: text after table header" % lineno)
            table = path
            statements.append({"kind": "array" if array else "table", "path": path,
                               "start": index, "end": index + 1, "indent": indent})
            index += 1
            continue
        key, after = parse_key(raw, len(indent), lineno)
        if after >= len(raw) or raw[after] != "=":
            raise TomlMergeError("line %d: '=' expected after key" % lineno)
        end, value, comment = _value_end(lines, index, after + 1)
        key_text = raw[len(indent):after].rstrip()
        statements.append({"kind": "keyval", "table": table, "key": key, "start": index,
                           "end": end, "indent": indent, "value": value, "comment": comment,
                           "key_text": key_text})
        index = end
    return statements


# ---------------------------------------------------------------- values


def split_lines(text):
    """Lines of a TOML document: TOML ends a line with LF or CRLF only. ``str.splitlines`` would
    also split at U+2028, U+2029, U+0085 (NEL), VT, FF and \\x1c-\\x1e, which TOML allows inside
    strings and comments."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


# Characters written as \uXXXX in a basic string: the control characters TOML forbids raw
# (U+0000-U+001F but tab, U+007F DEL), and the C1 controls (U+0080-U+009F, NEL among them) and
# U+2028 / U+2029, which TOML allows but line-oriented tools split on.
_ESCAPE = dict((code, "\\u%04x" % code) for code in list(range(0x20)) + [0x7f] + list(range(0x80, 0xa0))
               + [0x2028, 0x2029])
_ESCAPE.update({0x08: "\\b", 0x09: "\\t", 0x0a: "\\n", 0x0c: "\\f", 0x0d: "\\r", 0x22: '\\"', 0x5c: "\\\\"})


def render_string(value):
    """A TOML basic string of ``value`` (every character TOML forbids raw is escaped)."""
    return '"' + value.translate(_ESCAPE) + '"'


def render_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return render_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(render_value(item) for item in value) + "]"
    raise TomlMergeError(
        "values: %r is a %s; only strings, booleans, numbers and lists are supported "
        "(set a nested table with its own table path)" % (value, type(value).__name__))


def parse_scalar(text):
    """Decode a one-line TOML value for comparison; returns (ok, value)."""
    if text in ("true", "false"):
        return True, text == "true"
    if INTEGER.match(text):
        return True, int(text.replace("_", ""))
    if FLOAT.match(text):
        return True, float(text.replace("_", ""))
    if len(text) >= 2 and text[0] == text[-1] == "'" and not text.startswith("'''"):
        return True, text[1:-1]
    if len(text) >= 2 and text[0] == text[-1] == '"' and not text.startswith('"""'):
        try:
            return True, json.loads(text)
        except ValueError:
            return False, None
    return False, None


def same_value(existing_text, value):
    if existing_text is None:
        return False
    if existing_text == render_value(value):
        return True
    ok, decoded = parse_scalar(existing_text)
    if not ok or isinstance(value, (list, tuple)):
        return False
    if isinstance(value, bool) or isinstance(decoded, bool):
        return isinstance(value, bool) and isinstance(decoded, bool) and value == decoded
    return decoded == value


def render_key(part):
    return part if BARE_KEY.fullmatch(part) else render_string(part)


def render_path(path):
    return ".".join(render_key(part) for part in path)


# ---------------------------------------------------------------- merging


def _conflict(statements, path, values):
    """(line, message) of the first definition that a line edit of table ``path`` cannot update
    (a second header, an array of tables on the path, a dotted key or inline table defining
    (part of) it), or None."""
    headers = [s for s in statements if s["kind"] == "table" and s["path"] == path]
    if len(headers) > 1:
        return headers[1]["start"] + 1, "table [%s] is defined %d times" % (render_path(path), len(headers))
    for stmt in statements:
        line = stmt["start"] + 1
        if stmt["kind"] == "array" and stmt["path"] == path[:len(stmt["path"])]:
            return line, ("[[%s]] is an array of tables on the path of [%s]; not edited"
                          % (render_path(stmt["path"]), render_path(path)))
        if stmt["kind"] != "keyval":
            continue
        table, key = stmt["table"], stmt["key"]
        defined = table + key
        if table == path:
            if len(key) > 1 and key[0] in values:
                return line, "%s is a dotted-key table, cannot set it as a value" % render_path(key[:1])
            continue
        if len(table) < len(path) and (defined[:len(path)] == path
                                       or (len(defined) < len(path) and path[:len(defined)] == defined)):
            return line, ("[%s] is (partly) defined by the key %s (dotted key or inline table); "
                          "rewrite it as a [table] section to let it be merged"
                          % (render_path(path), stmt["key_text"]))
    return None


def _check_conflicts(statements, path, values):
    found = _conflict(statements, path, values)
    if found is not None:
        raise TomlMergeError("line %d: %s" % found)


def _block(statements, path, total_lines):
    """Return (header statement or None, keyvals of the table, line where the block ends)."""
    header = None
    if path:
        for stmt in statements:
            if stmt["kind"] == "table" and stmt["path"] == path:
                header = stmt
                break
        if header is None:
            return None, [], None
    begin = header["end"] if header else 0
    end = total_lines
    for stmt in statements:
        if stmt["kind"] in ("table", "array") and stmt["start"] >= begin:
            end = stmt["start"]
            break
    keyvals = [s for s in statements if s["kind"] == "keyval" and begin <= s["start"] < end]
    return header, keyvals, end


def _trim_back(lines, end, floor):
    """Move an insertion point back over blank and comment lines that lead into the next table."""
    while end > floor and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


def merge(text, path, values):
    """Return (new text, list of keys changed) with `values` set in table `path`."""
    if not isinstance(values, dict) or not values:
        raise TomlMergeError("values must be a non-empty dict")
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = split_lines(text)
    statements = scan(lines)
    path = list(path)
    _check_conflicts(statements, path, values)
    header, keyvals, block_end = _block(statements, path, len(lines))
    changed = []
    if path and header is None:
        lines, changed = _append_table(lines, statements, path, values)
    else:
        existing = {}
        for stmt in keyvals:
            if len(stmt["key"]) == 1:
                existing[stmt["key"][0]] = stmt
        replacements = []
        additions = []
        for key, value in values.items():
            stmt = existing.get(key)
            if stmt is None:
                additions.append("%s = %s" % (render_key(key), render_value(value)))
                changed.append(key)
            elif not same_value(stmt["value"], value):
                comment = (" " + stmt["comment"]) if stmt["comment"] else ""
                replacements.append((stmt["start"], stmt["end"], "%s%s = %s%s" % (
                    stmt["indent"], stmt["key_text"], render_value(value), comment)))
                changed.append(key)
        if additions:
            if keyvals:
                insert_at = keyvals[-1]["end"]
                indent = keyvals[-1]["indent"]
            else:
                insert_at = header["end"] if header else _trim_back(lines, block_end, 0)
                indent = (header["indent"] + "  ") if header else ""
            replacements.append((insert_at, insert_at, [indent + line for line in additions]))
        for start, end, new in sorted(replacements, key=lambda item: item[0], reverse=True):
            lines[start:end] = new if isinstance(new, list) else [new]
    if not changed:
        return text, []
    return newline.join(lines) + newline, changed


def _append_table(lines, statements, path, values):
    headers = [s for s in statements if s["kind"] in ("table", "array")]
    best = 0
    for stmt in headers:
        common = 0
        while common < min(len(stmt["path"]), len(path)) and stmt["path"][common] == path[common]:
            common += 1
        best = max(best, common)
    indent = "  " * (len(path) - 1)
    block = ["%s[%s]" % (indent, render_path(path))]
    block += ["%s  %s = %s" % (indent, render_key(key), render_value(value))
              for key, value in values.items()]
    if best == 0:
        end = len(lines)
        while end > 0 and not lines[end - 1].strip():
            end -= 1
        new_lines = lines[:end] + ([""] if end else []) + block
        return new_lines, list(values)
    related = [s for s in headers if s["path"][:best] == path[:best]]
    last = related[-1]
    following = [s for s in headers if s["start"] > last["start"]]
    end = following[0]["start"] if following else len(lines)
    end = _trim_back(lines, end, last["end"])
    trailer = [""] if end < len(lines) and lines[end].strip() else []
    new_lines = lines[:end] + [""] + block + trailer + lines[end:]
    return new_lines, list(values)


# ---------------------------------------------------------------- checking the result by meaning


def toml_loads():
    """``loads`` of ``tomllib`` (Python 3.11+) or ``tomli``; None when neither is importable."""
    try:
        import tomllib  # pylint: disable=import-outside-toplevel
        return tomllib.loads
    except ImportError:
        pass
    try:
        import tomli  # pylint: disable=import-outside-toplevel
        return tomli.loads
    except ImportError:
        return None


def _strict_equal(left, right):
    """Equality that tells true from 1 and 1 from 1.0 (Python's == does not)."""
    if isinstance(left, dict) or isinstance(right, dict):
        return (isinstance(left, dict) and isinstance(right, dict) and set(left) == set(right)
                and all(_strict_equal(left[key], right[key]) for key in left))
    if isinstance(left, (list, tuple)) or isinstance(right, (list, tuple)):
        return (isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)) and len(left) == len(right)
                and all(_strict_equal(a, b) for a, b in zip(left, right)))
    if isinstance(left, bool) or isinstance(right, bool) or isinstance(left, float) or isinstance(right, float):
        # nan means nan: a nan already in the file is unchanged, though nan != nan
        both_nan = isinstance(left, float) and isinstance(right, float) and math.isnan(left) and math.isnan(right)
        return type(left) is type(right) and (left == right or both_nan)
    return left == right


def _difference(expected, actual, where=()):
    """The first key path where two parsed documents differ, or None."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in list(expected) + [k for k in actual if k not in expected]:
            if key not in expected or key not in actual:
                return where + (key,)
            found = _difference(expected[key], actual[key], where + (key,))
            if found is not None:
                return found
        return None
    return None if _strict_equal(expected, actual) else where


def intended(document, path, values):
    """``document`` (parsed) with ``values`` set in table ``path``: the meaning a merge must have.
    Refuses a path through a value or an array of tables, and a key naming an existing table."""
    import copy  # pylint: disable=import-outside-toplevel

    result = copy.deepcopy(document)
    node = result
    for depth, part in enumerate(path):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise TomlMergeError("key %s is a %s, not a table: cannot set [%s] below it"
                                 % (render_path(path[:depth + 1]), type(child).__name__, render_path(path)))
        node = child
    for key, value in values.items():
        if isinstance(node.get(key), dict):
            raise TomlMergeError("key %s of [%s] names an existing table [%s]; refusing to replace a table "
                                 "by a value" % (render_key(key), render_path(path), render_path(list(path) + [key])))
        node[key] = list(value) if isinstance(value, tuple) else value
    return result


def merge_checked(text, path, values, loads=None):
    """``merge`` whose output is parsed (``tomllib``/``tomli``) and compared in meaning with the
    intended merge (parsed original with ``values`` set in ``path``) before anything is written.

    Returns (new text, changed keys, note): note is None, or says why the output was not parsed
    (no TOML parser on this Python). Raises TomlMergeError naming the key on any mismatch."""
    loads = toml_loads() if loads is None else loads
    path = list(path)
    if text.startswith("\ufeff"):
        raise TomlMergeError("the file starts with a UTF-8 byte-order mark (BOM), which TOML does not allow: "
                             "remove it; not edited")
    if loads is None:
        new_text, changed = merge(text, path, values)
        return new_text, changed, ("the result was not parsed back: neither tomllib (Python 3.11+) nor tomli "
                                   "is importable on this Python")
    try:
        original = loads(text)
    except ValueError as exc:
        raise TomlMergeError("the file is not valid TOML before the merge (%s); not edited" % exc)
    try:
        expected = intended(original, path, values)
    except TomlMergeError as exc:
        found = _conflict(scan(split_lines(text)), path, values)
        if found is not None:  # the line of the definition in the way
            raise TomlMergeError("line %d: %s" % (found[0], exc))
        raise
    if _difference(expected, original) is None:
        return text, [], None  # already means what was asked: nothing to write
    new_text, changed = merge(text, path, values)
    try:
        actual = loads(new_text)
    except ValueError as exc:
        raise TomlMergeError("setting %s in [%s] would write invalid TOML (%s); not edited"
                             % (", ".join(render_key(k) for k in values), render_path(path), exc))
    where = _difference(expected, actual)
    if where is not None:
        raise TomlMergeError("the merged text does not mean the requested merge at key %s (setting %s in [%s]); "
                             "not edited" % (render_path(list(where)) or "(top level)",
                                             ", ".join(render_key(k) for k in values), render_path(path)))
    return new_text, changed, None
