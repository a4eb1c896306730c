#!/usr/bin/env python3
"""faultfs: a tiny fault-injecting FUSE passthrough (mfusepy + libfuse3), used by
tests/kernel_faults.rs (R09, R11, R12); from ../shared/faults/, plus the "times" field and the
FAULTFS_DIRECT_IO and FAULTFS_FIRED_LOG environment variables.
usage: faultfs.py BACKING_DIR MOUNTPOINT CONTROL_JSON
CONTROL_JSON is re-read on every operation; a list of rules like
  {"op": "write"|"fsync"|"read"|"rename"|"create"|"unlink", "path": "*.log",
   "errno": "EIO", "after": 2,            # let the first 2 matching calls pass
   "mode": "error"|"short"|"lie",         # short: write half, return half; lie: report success, do nothing
   "offset_lo": 0, "offset_hi": 1<<62,    # byte range (read/write) for latent-sector-style faults
   "times": 1}                            # then fail only that many matching calls (default: all)
"""
import errno, fnmatch, json, os, sys
import mfusepy as fuse

class FaultFS(fuse.Operations):
    def __init__(self, root, ctl):
        self.root, self.ctl, self.count = os.path.realpath(root), ctl, {}
    def _p(self, path): return os.path.join(self.root, path.lstrip("/"))
    def _rules(self):
        try:
            with open(self.ctl) as f: return json.load(f)
        except (OSError, ValueError): return []
    def _fault(self, op, path, off=0, size=0):
        for i, r in enumerate(self._rules()):
            if r.get("op") != op or not fnmatch.fnmatch(path, r.get("path", "*")): continue
            lo, hi = r.get("offset_lo", 0), r.get("offset_hi", 1 << 62)
            if op in ("read", "write") and (off + size <= lo or off >= hi): continue
            k = (i, op); self.count[k] = self.count.get(k, 0) + 1
            if self.count[k] <= r.get("after", 0): continue
            if "times" in r and self.count[k] > r.get("after", 0) + r["times"]: continue
            self._fired(op, path)
            return r
        return None
    def _raise(self, r): raise fuse.FuseOSError(getattr(errno, r.get("errno", "EIO")))
    def _fired(self, op, path):                 # FAULTFS_FIRED_LOG: one line per injected fault
        log = os.environ.get("FAULTFS_FIRED_LOG")
        if log:
            with open(log, "a") as f: f.write(f"{op} {path}\n")
    # --- metadata
    def getattr(self, path, fh=None):
        st = os.lstat(self._p(path))
        return {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_atime", "st_mtime", "st_ctime")}
    def readdir(self, path, fh): return [".", ".."] + os.listdir(self._p(path))
    def statfs(self, path):
        s = os.statvfs(self._p(path))
        return {k: getattr(s, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_namemax")}
    def mkdir(self, path, mode): os.mkdir(self._p(path), mode)
    def rmdir(self, path): os.rmdir(self._p(path))
    def truncate(self, path, length, fh=None): os.truncate(self._p(path), length)
    def unlink(self, path):
        r = self._fault("unlink", path)
        if r: self._raise(r)
        os.unlink(self._p(path))
    def rename(self, old, new):
        r = self._fault("rename", new)
        if r: self._raise(r)
        os.rename(self._p(old), self._p(new))
    def utimens(self, path, times=None): os.utime(self._p(path), times)
    def chmod(self, path, mode): os.chmod(self._p(path), mode)
    # --- files
    def create(self, path, mode, fi=None):
        r = self._fault("create", path)
        if r: self._raise(r)
        return os.open(self._p(path), os.O_CREAT | os.O_RDWR, mode)
    # Without O_DIRECT: the daemon writes the kernel's bytes from its own unaligned buffers, which
    # an O_DIRECT backing file refuses (EINVAL); a client's O_DIRECT still bypasses the page cache.
    def open(self, path, flags): return os.open(self._p(path), flags & ~(os.O_APPEND | os.O_DIRECT))
    def read(self, path, size, off, fh):
        r = self._fault("read", path, off, size)
        if r: self._raise(r)                    # latent sector error on that range
        return os.pread(fh, size, off)
    def write(self, path, data, off, fh):
        r = self._fault("write", path, off, len(data))
        if r:
            mode = r.get("mode", "error")
            if mode == "lie": return len(data)
            if mode == "short": return os.pwrite(fh, data[: max(1, len(data) // 2)], off)
            self._raise(r)
        return os.pwrite(fh, data, off)
    def fsync(self, path, datasync, fh):
        r = self._fault("fsync", path)
        if r:
            if r.get("mode") == "lie": return 0
            self._raise(r)
        (os.fdatasync if datasync else os.fsync)(fh)
    def flush(self, path, fh): return 0
    def release(self, path, fh): os.close(fh)

if __name__ == "__main__":
    root, mnt, ctl = sys.argv[1:4]
    # FAULTFS_DIRECT_IO=0: keep the kernel's page cache, so files can be mapped shared
    # (seglog maps its index files; a direct_io FUSE file refuses that with ENODEV).
    direct_io = os.environ.get("FAULTFS_DIRECT_IO", "1") != "0"
    fuse.FUSE(FaultFS(root, ctl), mnt, foreground=True, nothreads=True, direct_io=direct_io)
