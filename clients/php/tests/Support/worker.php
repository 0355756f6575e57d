<?php

declare(strict_types=1);

// A second PHP process for the tests (see Worker): another request of a PHP
// application, taking and releasing locks through the client. Prints a line
// at each step the test waits for. Exit status 0 when all went as asked; 3
// when a lock asked for without waiting was busy (as Symfony's blocking test
// expects of its third process).

use Baton\Client;
use Baton\Symfony\BatonStore;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\LockFactory;

require __DIR__ . '/../bootstrap.php';

[, $action] = $argv + [1 => ''];
$name = $argv[2] ?? '';
$seconds = (float) ($argv[3] ?? 0);

$say = static function (string $line): void {
    fwrite(STDOUT, $line . "\n");
    fflush(STDOUT);
};

$client = new Client();

// holdFor waits as its HOLD argument says: SECONDS; "told", until the test
// tells it to go on (a line on stdin, Worker::tell); "waited", until the lock
// (its name in Baton) has a waiter queued, so that the waiter is known to
// wait for this hold (exit 4 after 30 s without one).
$holdFor = static function (string $lock) use ($argv, $client): void {
    switch ($argv[3] ?? '') {
        case 'told':
            fgets(STDIN);
            return;
        case 'waited':
            for ($until = microtime(true) + 30.0; ($client->state($lock)['waiters'] ?? 0) < 1; usleep(10_000)) {
                if (microtime(true) > $until) {
                    fwrite(STDERR, "nobody queued for $lock within 30 s\n");
                    exit(4);
                }
            }
            return;
    }
    usleep((int) ((float) $argv[3] * 1e6));
};

switch ($action) {
    case 'hold': // hold NAME SECONDS [shared]: take the lock, hold it SECONDS, release it
        $lease = $client->acquire($name, ttl: 30.0, wait: 10.0, shared: ($argv[4] ?? '') === 'shared');
        $say('held ' . $lease->fence);
        usleep((int) ($seconds * 1e6));
        $lease->release();
        $say('released');
        break;

    case 'proxy-up': // proxy-up - SECONDS: after SECONDS, end the fault proxy's /down
        usleep((int) ($seconds * 1e6));
        $post = stream_context_create(['http' => ['method' => 'POST']]);
        file_get_contents(getenv('BATON_PROXY_CONTROL') . '/down?on=0', false, $post);
        $say('up');
        break;

    case 'store-save': // store-save RESOURCE HOLD: BatonStore::save, hold (see $holdFor), delete
        $store = new BatonStore($client, 30.0);
        $key = new Key($name);
        $store->save($key);
        $say('saved');
        $holdFor($store->name($key));
        $store->delete($key);
        $say('deleted');
        break;

    case 'store-wait': // store-wait RESOURCE: BatonStore::waitAndSave, then delete
        $store = new BatonStore($client, 30.0);
        $key = new Key($name);
        $say('waiting');
        $store->waitAndSave($key);
        if (!$store->exists($key)) {
            exit(2);
        }
        $say('saved');
        $store->delete($key);
        break;

    case 'store-try': // store-try RESOURCE: BatonStore::save without waiting; exit 3 when busy
        $store = new BatonStore($client, 30.0);
        $key = new Key($name);
        try {
            $store->save($key);
        } catch (LockConflictedException) {
            $say('busy');
            exit(3);
        }
        $say('saved');
        $store->delete($key);
        break;

    case 'factory-hold': // factory-hold RESOURCE HOLD [read]: a LockFactory lock, held (see $holdFor)
        $store = new BatonStore($client, 30.0);
        $lock = (new LockFactory($store))->createLock($name);
        ($argv[4] ?? '') === 'read' ? $lock->acquireRead() : $lock->acquire();
        $say('acquired');
        $holdFor($store->name(new Key($name)));
        $lock->release();
        $say('released');
        break;

    case 'exit-inside': // exit-inside NAME: exit() in the middle of synchronized()
        $client->synchronized($name, static function () use ($say) {
            $say('inside');
            exit(0);
        });
        break;

    default:
        fwrite(STDERR, "unknown action $action\n");
        exit(64);
}
