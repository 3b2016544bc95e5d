"""The offline bundle built by playbooks/mirror.yml: packages with dependencies, pinned file,
wheels, flat apt index, and a MANIFEST.sha256 that matches every file."""

BUNDLE = "/srv/gpufleet-bundle"


def _names(host, directory, suffix):
    out = host.check_output("ls %s/%s" % (BUNDLE, directory))
    return [name for name in out.split() if name.endswith(suffix)]


def test_packages_come_with_their_dependencies(host):
    debs = _names(host, "debs", ".deb")
    packages = {name.split("_")[0] for name in debs}
    # jq depends on libjq1, which depends on libonig5; libc6 is in the closure too.
    assert {"jq", "libjq1", "libonig5", "libc6"} <= packages
    index = host.check_output("zcat %s/debs/Packages.gz" % BUNDLE)
    assert "Package: jq\n" in index and "Package: libonig5\n" in index


def test_pinned_file_and_wheels(host):
    assert host.file(BUNDLE + "/files/release-notes.txt").content_string == "gpufleet air-gap bundle test file\n"
    assert _names(host, "wheels", ".whl") == ["six-1.17.0-py2.py3-none-any.whl"]


def test_file_without_dest_is_stored_at_host_and_path(host):
    # The layout gpufleet.cluster.mirror_url maps upstream URLs to: serving the bundle as
    # gpufleet_mirror_url makes http://127.0.0.1:8080/core:/stable:/... resolve to this file.
    stored = host.file(BUNDLE + "/127.0.0.1:8080/core:/stable:/v1.31/deb/Release.key")
    assert stored.is_file
    assert stored.content_string == "gpufleet stand-in repository key\n"
    assert stored.mode == 0o644
    assert not host.file(BUNDLE + "/files/Release.key").exists
    manifest = host.file(BUNDLE + "/MANIFEST.sha256").content_string
    assert "  127.0.0.1:8080/core:/stable:/v1.31/deb/Release.key\n" in manifest


def test_manifest_lists_every_file_and_the_sums_match(host):
    manifest = host.file(BUNDLE + "/MANIFEST.sha256").content_string.splitlines()
    listed = sorted(line.split("  ", 1)[1] for line in manifest)
    files = sorted(host.check_output("cd %s && find . -type f ! -name MANIFEST.sha256 -printf '%%P\\n'" % BUNDLE).split())
    assert listed == files
    assert all(len(line.split("  ", 1)[0]) == 64 for line in manifest)
    check = host.run("cd %s && sha256sum --strict -c MANIFEST.sha256" % BUNDLE)
    assert check.rc == 0, check.stdout + check.stderr
    assert check.stdout.count(": OK") == len(files)


def test_a_wrong_checksum_is_detected(host):
    host.run_expect([0], "cp -a %s /tmp/bundle-copy" % BUNDLE)
    host.run_expect([0], "echo tampered >> /tmp/bundle-copy/files/release-notes.txt")
    check = host.run("cd /tmp/bundle-copy && sha256sum --strict -c MANIFEST.sha256")
    assert check.rc == 1
    assert "files/release-notes.txt: FAILED" in check.stdout
