"""Scripted command runners for unit tests of module_utils logic."""

from ansible_collections.gpufleet.cluster.plugins.module_utils.core.runner import CommandResult


class ScriptedRunner:
    """Answers commands from a script: {tuple(argv) or argv[0]: (rc, stdout, stderr)}.

    ``which`` answers from ``paths`` (name -> path or None). Every call is recorded in
    ``calls`` so tests can assert what would have been executed.
    """

    def __init__(self, script=None, paths=None):
        self.script = dict(script or {})
        self.paths = dict(paths or {})
        self.calls = []

    def which(self, name, required=False):
        path = self.paths.get(name)
        if path is None and required:
            raise OSError("%s not found" % name)
        return path

    def run(self, args, timeout=None, check_rc=False):
        self.calls.append(list(args))
        for key in (tuple(args), args[0]):
            if key in self.script:
                answer = self.script[key]
                if isinstance(answer, CommandResult):
                    return answer
                rc, out, err = (tuple(answer) + ("", ""))[:3]
                return CommandResult(rc, out, err)
        return CommandResult(127, "", "%s: command not found" % args[0])
