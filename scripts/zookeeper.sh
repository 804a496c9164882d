# Sourced by scripts/test.sh and by scripts/demo.sh --brokers: the cluster tests and the
# cluster demo run Debian's ZooKeeper 3.8 (on the Java 17 Spark already needs). Install it
# when it is missing, as CI runs this as root on a fresh machine.
# ONCELOG_ZOOKEEPER_CLASSPATH points at another installation instead.
if [ -z "${ONCELOG_ZOOKEEPER_CLASSPATH:-}" ] && [ ! -e /usr/share/java/zookeeper.jar ]; then
    echo "installing ZooKeeper (Debian's zookeeper package) for the local cluster"
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
    elif command -v sudo >/dev/null; then
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null
    else
        echo "ZooKeeper is missing: run 'apt-get update && apt-get install -y zookeeper' as root" >&2
        exit 1
    fi
fi
