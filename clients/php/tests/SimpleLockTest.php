<?php

declare(strict_types=1);

namespace Baton\Tests;

use Baton\Client;
use Baton\SimpleLock;
use Baton\Tests\Support\BatonTestCase;

/**
 * SimpleLock: the common PHP Redis lock class's methods, on Baton.
 */
final class SimpleLockTest extends BatonTestCase
{
    public function testLockIsLockingExpireUnlock(): void
    {
        $c = new Client();
        $name = $this->name();
        $l = new SimpleLock($c, owner: 'cron');
        self::assertFalse($l->isLocking($name));
        self::assertTrue($l->lock($name, timeout: 0, expire: 15));
        self::assertTrue($l->isLocking($name));
        self::assertSame([$name], $l->names());
        self::assertGreaterThan(0, $l->fence($name));
        $state = $c->state($name);
        self::assertSame('cron', $state['owner']);
        self::assertLessThanOrEqual(15000, $state['ttl_ms']);

        self::assertTrue($l->expire($name, 60));
        self::assertGreaterThan(50000, $c->state($name)['ttl_ms']);
        self::assertTrue($l->expire($name, 0), 'at least 1 s, as in the original');
        self::assertLessThanOrEqual(1000, $c->state($name)['ttl_ms']);

        self::assertFalse((new SimpleLock($c))->lock($name), 'another object finds it busy');
        self::assertFalse($l->lock($name), 'and so does this one: it is no re-entrant lock');
        self::assertFalse((new SimpleLock($c))->unlock($name), 'only the holder unlocks');
        self::assertTrue($l->unlock($name));
        self::assertFalse($l->unlock($name));
        self::assertFalse($l->isLocking($name));
        self::assertFalse($l->expire($name, 10));
        self::assertFalse($c->state($name)['held']);
    }

    public function testLockWaitsUpToTimeout(): void
    {
        $c = new Client();
        $name = $this->name();
        $first = new SimpleLock($c);
        self::assertTrue($first->lock($name, 0, 3));
        $second = new SimpleLock($c);
        $start = microtime(true);
        self::assertFalse($second->lock($name, 0.3, 5));
        $took = microtime(true) - $start;
        self::assertGreaterThan(0.05, $took, 'waited');
        self::assertLessThan(2.0, $took, 'gave up at its timeout, not when the 3 s hold ended');
        self::assertTrue($second->lock($name, 10, 5), 'granted when the first expired');
        self::assertFalse($first->isLocking($name), 'the first one knows it expired');
        self::assertFalse($first->expire($name, 10));
        self::assertSame(1, $second->unlockAll());
    }

    public function testUnlockAllReleasesEveryLockThisObjectHolds(): void
    {
        $c = new Client();
        $names = [$this->name(), $this->name(), $this->name(), $this->name()];
        $l = new SimpleLock($c);
        foreach ($names as $n) {
            self::assertTrue($l->lock($n, 0, 10));
        }
        $other = new SimpleLock($c);
        $theirs = $this->name();
        self::assertTrue($other->lock($theirs, 0, 10));
        $c->forceRelease($names[3]); // one of them is lost meanwhile: not counted

        self::assertSame(3, $l->unlockAll());
        self::assertSame([], $l->names());
        foreach ($names as $n) {
            self::assertFalse($c->state($n)['held']);
        }
        self::assertTrue($c->state($theirs)['held'], 'another object\'s lock stays');
        self::assertSame(0, $l->unlockAll());
        self::assertSame(1, $other->unlockAll());
    }
}
