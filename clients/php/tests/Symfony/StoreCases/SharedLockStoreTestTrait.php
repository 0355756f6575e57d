<?php

declare(strict_types=1);

namespace Baton\Tests\Symfony\StoreCases;

use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\SharedLockStoreInterface;

/**
 * The cases of Symfony Lock's SharedLockStoreTestTrait, written again here
 * (see AbstractStoreTestCase): read (shared) and write (exclusive) locks,
 * including promoting a read lock and demoting a write lock.
 */
trait SharedLockStoreTestTrait
{
    public function testSharedLockReadFirst(): void
    {
        $store = $this->sharedStore();
        $resource = $this->resource();
        [$r1, $r2, $w] = [new Key($resource), new Key($resource), new Key($resource)];
        $exist = fn () => [$store->exists($r1), $store->exists($r2), $store->exists($w)];

        $store->saveRead($r1);
        self::assertSame([true, false, false], $exist());
        $store->saveRead($r2); // readers share
        self::assertSame([true, true, false], $exist());
        $this->assertConflict(fn () => $store->save($w), 'a writer beside readers');
        self::assertSame([true, true, false], $exist(), 'the refusal changed nothing');

        $store->delete($r1);
        self::assertSame([false, true, false], $exist());
        $store->delete($r2);
        self::assertSame([false, false, false], $exist());
        $store->save($w);
        self::assertSame([false, false, true], $exist());
        $store->delete($w);
        self::assertSame([false, false, false], $exist());
    }

    public function testSharedLockWriteFirst(): void
    {
        $store = $this->sharedStore();
        $resource = $this->resource();
        [$w, $r] = [new Key($resource), new Key($resource)];

        $store->save($w);
        self::assertSame([true, false], [$store->exists($w), $store->exists($r)]);
        $this->assertConflict(fn () => $store->saveRead($r), 'a reader beside a writer');
        self::assertSame([true, false], [$store->exists($w), $store->exists($r)]);

        $store->delete($w);
        self::assertSame([false, false], [$store->exists($w), $store->exists($r)]);
        $store->save($r);
        self::assertSame([false, true], [$store->exists($w), $store->exists($r)]);
        $store->delete($r);
        self::assertSame([false, false], [$store->exists($w), $store->exists($r)]);
    }

    public function testSharedLockPromote(): void
    {
        $store = $this->sharedStore();
        $resource = $this->resource();
        [$r1, $r2] = [new Key($resource), new Key($resource)];

        $store->saveRead($r1);
        $store->saveRead($r2);
        self::assertSame([true, true], [$store->exists($r1), $store->exists($r2)]);
        $this->assertConflict(fn () => $store->save($r1), 'promoting a reader while another reads');
        self::assertSame([true, true], [$store->exists($r1), $store->exists($r2)], 'both still read');
        $store->delete($r1);
        $store->delete($r2);
    }

    public function testSharedLockPromoteAllowed(): void
    {
        $store = $this->sharedStore();
        $resource = $this->resource();
        [$k1, $k2] = [new Key($resource), new Key($resource)];

        $store->saveRead($k1);
        $store->save($k1); // the only reader may become the writer
        $this->assertConflict(fn () => $store->saveRead($k2), 'a reader beside the promoted writer');
        self::assertSame([true, false], [$store->exists($k1), $store->exists($k2)]);

        $store->delete($k1);
        $store->saveRead($k2);
        self::assertSame([false, true], [$store->exists($k1), $store->exists($k2)]);
        $store->delete($k2);
    }

    public function testSharedLockDemote(): void
    {
        $store = $this->sharedStore();
        $resource = $this->resource();
        [$k1, $k2] = [new Key($resource), new Key($resource)];

        $store->save($k1);
        $store->saveRead($k1); // the writer becomes a reader ...
        $store->saveRead($k2); // ... so another reader joins
        self::assertSame([true, true], [$store->exists($k1), $store->exists($k2)]);
        $store->delete($k1);
        $store->delete($k2);
    }

    private function sharedStore(): SharedLockStoreInterface
    {
        $store = $this->getStore();
        self::assertInstanceOf(SharedLockStoreInterface::class, $store);

        return $store;
    }

    private function assertConflict(callable $f, string $what): void
    {
        try {
            $f();
            self::fail("no conflict: $what");
        } catch (LockConflictedException) {
            $this->addToAssertionCount(1);
        }
    }
}
