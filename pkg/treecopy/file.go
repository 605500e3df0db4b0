package treecopy

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// job is a regular file to copy: the source open, and either its copy
// made (dst) or the copy's directory open (dstDir) for the worker to make
// it in, which spreads the file system's creations over the workers.
type job struct {
	src, dst int
	dstDir   int         // a duplicate, -1 when dst is made
	st       unix.Stat_t // of src, taken on the open descriptor
	dir      *frame
	name     string
}

// startFile opens a regular file of src and creates its copy, and hands
// both to a worker. It waits for a free slot first: files in flight are
// bounded (their descriptors, and the queue).
func (c *copier) startFile(dir *frame, name string, seen *unix.Stat_t) error {
	select {
	case c.slots <- struct{}{}:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	j, err := c.openFile(dir, name, uint64(seen.Nlink)) // uint32 on arm64
	if err != nil {
		<-c.slots
		return err
	}
	c.files++
	c.size += j.st.Size
	c.jobs <- j // never blocks: as many places as slots
	return nil
}

// openFile opens a regular file of src; nlink is the links the walk saw
// it with, which decided whether another name will be linked to its copy.
func (c *copier) openFile(dir *frame, name string, nlink uint64) (job, error) {
	// O_NONBLOCK: a FIFO swapped in for the file does not block the open;
	// O_NOATIME: reading leaves the tenant's access time alone.
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	j := job{src: -1, dst: -1, dstDir: -1, dir: dir, name: name}
	src, err := openat(dir.src, name, flags|unix.O_NOATIME)
	if errors.Is(err, unix.EPERM) {
		src, err = openat(dir.src, name, flags) // not the owner, and no CAP_FOWNER
	}
	if errors.Is(err, unix.ELOOP) {
		return j, errAgain // swapped for a symlink
	}
	if err != nil {
		return j, err
	}
	if err := unix.Fstat(src, &j.st); err != nil {
		unix.Close(src)
		return j, err
	}
	if j.st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(src)
		return j, errAgain
	}
	j.src = src
	if nlink == 1 && j.st.Nlink == 1 && dir.parent != nil {
		// A worker makes the copy: no other name waits to be linked to
		// it. (In the root, which Copy finishes itself, the walker does.)
		if j.dstDir, err = unix.Dup(dir.dst); err != nil {
			unix.Close(src)
			return j, err
		}
		dir.unfinished.Add(1)
		return j, nil
	}
	if j.dst, err = createIn(dir.dst, name); err != nil {
		unix.Close(src)
		return j, mark(err)
	}
	return j, nil
}

func createIn(dir int, name string) (int, error) {
	return openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC)
}

func openat(dir int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, flags, 0o600)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// worker copies the files the walker opened, until the walk ends; after a
// failure or a cancellation it only closes them.
func (c *copier) worker() {
	for j := range c.jobs {
		if c.ctx.Err() == nil {
			if err := c.copyFile(&j); err != nil {
				c.fail(fmt.Errorf("treecopy: %s: %w", j.dir.relOf(j.name), err))
			}
		}
		unix.Close(j.src)
		if j.dst >= 0 {
			unix.Close(j.dst)
		}
		if j.dstDir >= 0 {
			if c.ctx.Err() == nil {
				if err := c.release(j.dir, j.dstDir); err != nil {
					c.fail(err)
				}
			}
			unix.Close(j.dstDir)
		}
		<-c.slots
	}
}

// copyFile makes the copy if the walker left that to the worker, and
// fills it.
func (c *copier) copyFile(j *job) error {
	if j.dstDir >= 0 {
		dst, err := createIn(j.dstDir, j.name)
		if err != nil {
			return mark(err)
		}
		j.dst = dst
	}
	return c.fill(*j)
}

// fill copies a file's data, then its size, owner, mode and times.
func (c *copier) fill(j job) error {
	n, err := copyData(j.src, j.dst, j.st.Size)
	c.bytes.Add(n)
	if err != nil {
		return err
	}
	if err := unix.Ftruncate(j.dst, j.st.Size); err != nil {
		return err
	}
	return c.setAttrs(j.dst, &j.st)
}

// copyData copies the data extents of src's first size bytes to the same
// offsets of dst, leaving holes as holes, and says how many bytes it
// copied. A file system without SEEK_DATA (EINVAL) is copied whole.
func copyData(src, dst int, size int64) (int64, error) {
	var copied int64
	for off := int64(0); off < size; {
		data, err := unix.Seek(src, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO):
			return copied, nil // no data after off (or the file shrank): a hole to the end
		case errors.Is(err, unix.EINVAL) && off == 0:
			n, err := copyRange(src, dst, 0, size)
			return n, err
		case err != nil:
			return copied, err
		}
		hole, err := unix.Seek(src, data, unix.SEEK_HOLE)
		if err != nil {
			return copied, err
		}
		hole = min(hole, size)
		n, err := copyRange(src, dst, data, hole-data)
		copied += n
		if err != nil {
			return copied, err
		}
		if n < hole-data {
			return copied, nil // the file shrank meanwhile: what is left is copied
		}
		off = hole
	}
	return copied, nil
}

// noCopyFileRange is set once the kernel has said it has no copy_file_range.
var noCopyFileRange atomic.Bool

// copyRange copies n bytes at off from src to dst, with copy_file_range
// (no trip through user space; on some file systems a server-side copy or
// a shared extent) and with read and write where the kernel cannot.
// A short count means the source ended before.
func copyRange(src, dst int, off, n int64) (int64, error) {
	var done int64
	for !noCopyFileRange.Load() && done < n {
		roff, woff := off+done, off+done
		k, err := unix.CopyFileRange(src, &roff, dst, &woff, int(min(n-done, 1<<30)), 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOSYS):
			noCopyFileRange.Store(true)
		case errors.Is(err, unix.EXDEV), errors.Is(err, unix.EINVAL), errors.Is(err, unix.EOPNOTSUPP):
			// Not between these two files: read and write the rest.
		case err != nil:
			return done, err
		case k == 0:
			return done, nil
		default:
			done += int64(k)
			continue
		}
		break
	}
	if done == n {
		return done, nil
	}
	k, err := readWrite(src, dst, off+done, n-done)
	return done + k, err
}

// bufPool holds the buffers of readWrite, one per worker at most.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

func readWrite(src, dst int, off, n int64) (int64, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var done int64
	for done < n {
		chunk := buf[:min(int64(len(buf)), n-done)]
		k, err := unix.Pread(src, chunk, off+done)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, err
		}
		if k == 0 {
			return done, nil
		}
		if err := pwriteAll(dst, chunk[:k], off+done); err != nil {
			return done, err
		}
		done += int64(k)
	}
	return done, nil
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		k, err := unix.Pwrite(fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if k == 0 {
			return io.ErrShortWrite
		}
		b, off = b[k:], off+int64(k)
	}
	return nil
}

// futimens sets fd's access and modification times to st's: utimensat
// with a NULL path, which x/sys/unix has no wrapper for.
func futimens(fd int, st *unix.Stat_t) error {
	ts := [2]unix.Timespec{st.Atim, st.Mtim}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
