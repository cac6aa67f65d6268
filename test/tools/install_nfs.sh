# Sourced by install.sh. The NFS fixture of the kernel matrix (test/vm, TestNFS): Debian 12's
# NFS server and client, unpacked, not installed, into $CACHE/nfs/root (usr/sbin/mount.nfs,
# rpc.nfsd, rpc.mountd, rpc.statd, rpcbind, exportfs, ...). Only a guest copies them into its
# own overlay: the host must keep no mount.nfs, or the suite's test of the "no NFS client"
# refusal sees one. The guest runs the host's userland, so these are bookworm's builds, as the
# host (the README's platform) is; every library they link is already on such a host.
NFS_DEBS=(
	"nfs-kernel-server=1:2.6.2-4+deb12u1"
	"nfs-common=1:2.6.2-4+deb12u1"
	"libnfsidmap1=1:2.6.2-4+deb12u1"
	"rpcbind=1.2.6-6+b1"
	"keyutils=1.6.3-2"
)
install_nfs() {
	local ndir=$CACHE/nfs apt_dir deb want
	want="${NFS_DEBS[*]}"
	stamp_ok nfs "$want" && [ -x "$ndir/root/usr/sbin/mount.nfs" ] && return 0
	echo "install.sh: fetching Debian 12's NFS server and client debs into $ndir (a few seconds)" >&2
	apt_dir=$ndir/apt
	rm -rf "$ndir/root" "$apt_dir"
	mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs" "$ndir/root"
	: >"$apt_dir/status"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main" >"$apt_dir/sources.list"
	local -a apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Dir::State::status=$apt_dir/status"
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false -o APT::Sandbox::User=root)
	apt-get -qq "${apt_opts[@]}" update >&2
	(cd "$apt_dir/debs" && apt-get -qq "${apt_opts[@]}" download "${NFS_DEBS[@]}" >&2)
	for deb in "$apt_dir/debs"/*.deb; do
		dpkg-deb -x "$deb" "$ndir/root"
	done
	# bookworm's nfs-common puts mount.nfs under /sbin, the rest under /usr/sbin; the guest's
	# /usr is merged, so everything goes under usr/.
	for d in sbin bin lib; do
		if [ -d "$ndir/root/$d" ]; then
			mkdir -p "$ndir/root/usr/$d"
			cp -a "$ndir/root/$d/." "$ndir/root/usr/$d/"
			rm -rf "${ndir:?}/root/$d"
		fi
	done
	[ -x "$ndir/root/usr/sbin/mount.nfs" ] && [ -x "$ndir/root/usr/sbin/rpc.nfsd" ] && [ -x "$ndir/root/usr/sbin/rpcbind" ] ||
		{ echo "install.sh: the NFS debs gave no mount.nfs, rpc.nfsd or rpcbind under $ndir/root/usr/sbin" >&2; exit 1; }
	rm -rf "$apt_dir"
	echo "$want" >"$BIN/.nfs"
}
