<?php

declare(strict_types=1);

namespace Baton\Tests\Symfony;

use Baton\Client;
use Baton\Symfony\BatonStore;
use Baton\Tests\Symfony\StoreCases\AbstractStoreTestCase;
use Baton\Tests\Symfony\StoreCases\BlockingStoreTestTrait;
use Baton\Tests\Symfony\StoreCases\ExpiringStoreTestTrait;
use Baton\Tests\Symfony\StoreCases\SharedLockStoreTestTrait;
use Symfony\Component\Lock\BlockingSharedLockStoreInterface;
use Symfony\Component\Lock\BlockingStoreInterface;
use Symfony\Component\Lock\Exception\InvalidTtlException;
use Symfony\Component\Lock\Exception\LockConflictedException;
use Symfony\Component\Lock\Exception\LockStorageException;
use Symfony\Component\Lock\Key;
use Symfony\Component\Lock\PersistingStoreInterface;
use Symfony\Component\Lock\SharedLockStoreInterface;

/**
 * BatonStore against Symfony Lock's store cases that apply to it (expiring,
 * blocking, shared), and what is its own: names, promotion and demotion
 * through the fair queue, errors, keys that travel.
 */
final class BatonStoreTest extends AbstractStoreTestCase
{
    use ExpiringStoreTestTrait;
    use BlockingStoreTestTrait;
    use SharedLockStoreTestTrait;

    protected function getStore(): PersistingStoreInterface
    {
        return new BatonStore(new Client(), 10.0);
    }

    protected function getClockDelay(): int
    {
        // A lock of 2 delays must still be there when the next call looks,
        // however loaded the machine (Baton's shortest lease is 100 ms).
        return 1_000_000;
    }

    public function testImplementsSymfonysStoreInterfaces(): void
    {
        $store = $this->getStore();
        foreach (
            [PersistingStoreInterface::class, BlockingStoreInterface::class, SharedLockStoreInterface::class,
                  BlockingSharedLockStoreInterface::class] as $interface
        ) {
            self::assertInstanceOf($interface, $store);
        }
        $this->expectException(InvalidTtlException::class);
        new BatonStore(new Client(), 0.0);
    }

    public function testNamesAreKeptWhenValidAndHashedOtherwise(): void
    {
        $store = new BatonStore(new Client());
        self::assertSame('invoices:2024-06', $store->name(new Key('invoices:2024-06')));
        $odd = $store->name(new Key('App\\Job::run/42 ü'));
        self::assertMatchesRegularExpression('/^App_Job::run_42_\.[0-9a-f]{32}$/', $odd);
        self::assertNotSame($odd, $store->name(new Key('App\\Job::run/42 u')), 'no two resources share a name');
        self::assertSame('billing:x', (new BatonStore(new Client(), prefix: 'billing:'))->name(new Key('x')));
        self::assertMatchesRegularExpression('/^[A-Za-z0-9._:-]{1,200}$/', $store->name(new Key(str_repeat('é', 300))));
        self::assertNotSame('.', $store->name(new Key('.')));
    }

    public function testAHoldTakenWithTheClientConflicts(): void
    {
        $c = new Client();
        $store = new BatonStore($c, 5.0);
        $key = new Key($this->name());
        $lease = $c->acquire($store->name($key), ttl: 5.0, wait: 0.0);
        try {
            $store->save($key);
            self::fail('saved a lock the client holds');
        } catch (LockConflictedException $e) {
            self::assertStringContainsString('423 lock-held', $e->getMessage());
        }
        $lease->release();
        $store->save($key);
        $state = $c->state($store->name($key));
        self::assertSame('exclusive', $state['mode']);
        self::assertEqualsWithDelta(5000, $state['ttl_ms'], 500, 'the initial TTL');
        $store->delete($key);
    }

    public function testAKeyTravelsToAnotherProcess(): void
    {
        $store = $this->getStore();
        $key = new Key($this->resource());
        $store->save($key);
        $moved = unserialize(serialize($key)); // e.g. in a Messenger message
        $elsewhere = new BatonStore(new Client(), 10.0);
        self::assertTrue($elsewhere->exists($moved));
        $elsewhere->putOffExpiration($moved, 3.0);
        $elsewhere->delete($moved);
        self::assertFalse($store->exists($key));
    }

    public function testPromoteWhileOthersWaitIsAConflictThatKeepsTheReadLock(): void
    {
        $c = new Client();
        $store = new BatonStore($c, 10.0);
        $resource = $this->resource();
        $reader = new Key($resource);
        $store->saveRead($reader);
        $ticket = $c->enqueue($store->name($reader)); // a writer queued before the promotion
        try {
            $store->save($reader);
            self::fail('promoted past a queued writer');
        } catch (LockConflictedException) {
        }
        self::assertTrue($store->exists($reader));
        self::assertSame(1, $c->state($store->name($reader))['waiters'], 'the promotion left the queue');
        $ticket->cancel();
        $store->save($reader);
        self::assertSame('exclusive', $c->state($store->name($reader))['mode']);
        $store->delete($reader);
    }

    public function testBlockingPromoteGivesTheReadLockUpWhileItWaits(): void
    {
        $c = new Client();
        $store = new BatonStore($c, 10.0);
        $resource = $this->resource();
        [$mine, $other] = [new Key($resource), new Key($resource)];
        $store->saveRead($mine);
        $store->saveRead($other);
        $w = $this->worker(['store-try', $resource]); // finds the lock busy
        $w->expect('busy');
        self::assertSame(3, $w->wait());
        // Two readers each promoting would deadlock if each kept its read lock;
        // here the first gives it up, first in line, and gets the write lock
        // once the other reader is done.
        $start = microtime(true);
        $store->putOffExpiration($other, 2.0);
        $store->waitAndSave($mine);
        self::assertGreaterThan(1.0, microtime(true) - $start, 'waited for the other reader to be done');
        self::assertSame('exclusive', $c->state($store->name($mine))['mode']);
        self::assertFalse($store->exists($other));
        $store->delete($mine);
    }

    public function testDemoteWithWritersQueuedKeepsTheWriteLock(): void
    {
        $c = new Client();
        $store = new BatonStore($c, 10.0);
        $key = new Key($this->resource());
        $store->save($key);
        $ticket = $c->enqueue($store->name($key));
        $store->saveRead($key); // cannot hand over without skipping the writer: stays exclusive
        self::assertTrue($store->exists($key));
        self::assertSame('exclusive', $c->state($store->name($key))['mode']);
        $store->delete($key);
        self::assertNotNull($ticket->poll(1.0), 'the queued writer is next');
    }

    public function testBlockingReadWaitsForTheWriter(): void
    {
        $store = $this->getStore();
        $resource = $this->resource();
        $w = $this->worker(['store-save', $resource, '0.5']);
        $w->expect('saved');
        $key = new Key($resource);
        self::assertInstanceOf(BlockingSharedLockStoreInterface::class, $store);
        $store->waitAndSaveRead($key);
        $w->expect('deleted');
        self::assertSame(0, $w->wait());
        self::assertTrue($store->exists($key));
        $store->delete($key);
    }

    public function testBatonUnreachableIsAStorageError(): void
    {
        $store = new BatonStore(new Client(url: 'http://127.0.0.1:1', retryFor: 0.1), 5.0);
        $this->expectException(LockStorageException::class);
        $store->save(new Key($this->resource()));
    }
}
