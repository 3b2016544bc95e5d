"""The fleet report page in a real browser: headless Chromium (Debian package chromium, installed by
scripts/setup.sh) loads fleet-report.html from a file, runs its script, and the tests assert on the
rendered DOM (--dump-dom: ranking order, sorting and filtering from the address, grouped lines,
history marks) and on the painted screenshot (--screenshot: the critical severity colour is on
screen). The report comes from two callback runs (a sweep, then a --limit run) over node_validate
results of the fixture nodes."""

import re
import shutil
import struct
import subprocess
import zlib

import pytest

from test_fleet_report_history import degraded, dgx, run
from test_node_validate import node_validate

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (scripts/setup.sh installs "
                                                         "the Debian package chromium when run as root)")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("browser")
    reports = tmp_path / "reports"
    run(reports, tmp_path, {"dgx-fab": dgx("h100-fabric-not-started"), "dgx-bus": dgx("h100-gpu-fell-off-bus"),
                            "ib-degraded": degraded(), "dgx-ok": dgx("h100-healthy"),
                            "dgx-ok2": dgx("h100-healthy"),
                            # a CPU node whose HCA driver is not loaded: no GPU, rdma.modules failing
                            "cpu-01": node_validate("mlx5-absent", {"expected_count": 0}, {})},
        "2026-11-23T00:10:00Z")
    run(reports, tmp_path, {"dgx-ok": dgx("h100-healthy")}, "2026-11-23T00:40:00Z")  # --limit dgx-ok
    return tmp_path, reports / "fleet-report.html"


def chromium(tmp_path, *args):
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--user-data-dir=%s" % (tmp_path / "profile")] + list(args)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def dom(tmp_path, html, fragment=""):
    return chromium(tmp_path, "--window-size=1400,900", "--dump-dom", "file://%s%s" % (html, fragment))


@pytest.fixture(scope="module")
def page_dom(page):
    """The page's DOM after its script ran, in a 1400x900 window (one Chromium run for the tests
    that read the unfiltered page)."""
    tmp_path, html = page
    return dom(tmp_path, html)


def visible_hosts(document):
    """Host rows of the table in DOM order: [(host, hidden)]."""
    body = document.split('<table class="grid" id="hosts"', 1)[1].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    rows = re.findall(r"<tr ([^>]*)>", body)
    return [(re.search(r'data-host="([^"]*)"', row).group(1), " hidden" in " " + row) for row in rows]


def test_the_script_ran_and_hosts_are_ranked_by_severity(page_dom):
    document = page_dom
    assert '<html lang="en" data-js="ready">' in document  # set by the page's script once it ran
    hosts = visible_hosts(document)
    assert hosts == [("dgx-bus", False), ("dgx-fab", False), ("ib-degraded", False), ("cpu-01", False),
                     ("dgx-ok", False), ("dgx-ok2", False)]
    assert '<th data-sort="rank" data-type="num" aria-sort="ascending">' in document
    assert '<span id="shown">6</span>' in document
    # eight identical gpu.fabric lines are one, naming its entry in docs/contracts.md (no outside link)
    assert document.count("<code>gpu.fabric</code></span><code>[gpu0\u20137]</code>") == 1
    assert re.search(r'<span class="cid" title="docs/contracts\.md#gpu\.count">', document)
    # history over the kept runs: dgx-ok was in both, dgx-ok2 only in the first (grey, no class)
    row = document.split('data-host="dgx-ok"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="hist"><i class="pass"></i><i class="pass"></i></td>' in row
    row2 = document.split('data-host="dgx-ok2"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="hist"><i class="pass"></i><i></i></td>' in row2


def test_filter_and_sort_from_the_address(page):
    tmp_path, html = page
    document = dom(tmp_path, html, "#q=fabric&health=fail")
    assert [host for host, hidden in visible_hosts(document) if not hidden] == ["dgx-fab"]
    assert '<span id="shown">1</span>' in document
    document = dom(tmp_path, html, "#sort=host&dir=desc")
    assert [host for host, _hidden in visible_hosts(document)] == ["ib-degraded", "dgx-ok2", "dgx-ok", "dgx-fab",
                                                                    "dgx-bus", "cpu-01"]
    assert 'data-sort="host" aria-sort="descending"' in document
    document = dom(tmp_path, html, "#health=ok&sort=seen&dir=desc")
    assert [host for host, hidden in visible_hosts(document) if not hidden] == ["dgx-ok", "dgx-ok2"]


def _png_pixels(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB/RGBA non-interlaced PNG."""
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour, _c, _f, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0
    channels = 3 if colour == 2 else 4
    raw, stride, rows, previous = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up, corner = previous[x], previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def test_screenshot_shows_the_critical_host_first(page):
    tmp_path, html = page
    shot = tmp_path / "report.png"
    chromium(tmp_path, "--screenshot=%s" % shot, "--window-size=1200,800", "--hide-scrollbars",
             "file://%s" % html)
    width, height, channels, rows = _png_pixels(str(shot))
    assert (width, height) == (1200, 800)

    def rows_with(rgb):
        pixel = bytes(rgb)
        return [y for y, line in enumerate(rows)
                if any(line[x:x + 3] == pixel for x in range(0, len(line), channels))]

    critical = rows_with((0x8F, 0x1A, 0x10))  # .sev-critical: the legend, then dgx-bus (rank 1)
    high = rows_with((0xD9, 0x48, 0x3B))  # .sev-high: the legend, then dgx-fab and ib-degraded
    assert critical and high, "severity colours not painted"
    # the critical host's cell is painted above the last high one (ranked wrong, it would be below)
    assert max(critical) < max(high)
    assert max(critical) > min(high)  # below the legend: a table cell, not only the legend


def test_the_grid_fits_1400_px_and_reads_like_a_report(page_dom):
    """At 1400 px the whole check grid is on screen (columns grouped by family under one header
    each, no horizontal scrollbar hiding the RDMA columns); a host without GPUs does not read
    "0x GPU"; observed values are words, not JSON; rdma.modules labels its value "missing"."""
    document = page_dom
    assert '<div class="scroll" id="grid" data-overflow="no">' in document
    assert '<span id="more" class="hint" hidden="">' in document
    families = re.findall(r'<th class="fam fam-first" id="family-(\w+)" data-family="\w+" colspan="(\d+)">', document)
    assert [name for name, _span in families] == ["gpu", "rdma"] and all(int(span) > 1 for _n, span in families)
    row = document.split('data-host="cpu-01"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="t gpu">no GPU</td>' in row and "0x GPU" not in row
    problems = document.split("<h2>Failing and warning checks</h2>", 1)[1]
    assert "(observed nvml: 7, pci: 8; expected 8)" in problems  # gpu.count of dgx-bus
    assert "&#34;" not in problems.split('<p class="meta">', 1)[0]  # no JSON quotes in the problem lines
    modules = problems.split("<code>rdma.modules</code>", 1)[1].split("</li>", 1)[0]
    assert "(missing " in modules and "; required " in modules and "observed" not in modules


def test_picking_a_family_scrolls_the_grid_to_it(page):
    """In a window too narrow for the grid the hint shows, and #family=rdma scrolls the RDMA
    columns into view: their header (marked current) is painted on screen."""
    tmp_path, html = page
    document = chromium(tmp_path, "--window-size=900,700", "--dump-dom", "file://%s#family=rdma" % html)
    assert '<div class="scroll" id="grid" data-overflow="yes">' in document
    assert '<span id="more" class="hint">' in document
    assert '<table class="grid" id="hosts" data-family="rdma">' in document
    assert '<th class="fam fam-first current" id="family-rdma"' in document
    assert '<option value="rdma">rdma (' in document
    shot = tmp_path / "family.png"
    chromium(tmp_path, "--screenshot=%s" % shot, "--window-size=900,700", "--hide-scrollbars",
             "file://%s#family=rdma" % html)
    width, _height, channels, rows = _png_pixels(str(shot))
    current = bytes((0x2B, 0x4C, 0x7E))  # th.fam.current
    painted = [x // channels for line in rows for x in range(0, width * channels, channels)
               if line[x:x + 3] == current]
    assert painted, "the RDMA family header is not on screen after #family=rdma"
