<?php

declare(strict_types=1);

namespace Baton\Tests\Symfony\StoreCases;

use Symfony\Component\Lock\Key;

/**
 * The case of Symfony Lock's BlockingStoreTestTrait, written again here (see
 * AbstractStoreTestCase). Symfony forks three children with pcntl; here they
 * are three PHP processes (tests/Support/worker.php), as three requests of an
 * application would be, and the test follows the lines they print instead of
 * sleeping in between.
 */
trait BlockingStoreTestTrait
{
    public function testBlockingLocks(): void
    {
        $resource = $this->resource();

        // #1 holds the lock until told, #2 blocks in waitAndSave() meanwhile,
        // and #3 tries save() meanwhile, which must fail (exit 3).
        $first = $this->worker(['store-save', $resource, 'told']);
        $first->expect('saved');
        $second = $this->worker(['store-wait', $resource]);
        $second->expect('waiting');
        $third = $this->worker(['store-try', $resource]);
        $third->expect('busy');
        $first->tell();
        $first->expect('deleted');
        $second->expect('saved');

        self::assertSame(0, $first->wait(), 'first: ' . $first->stderr());
        self::assertSame(0, $second->wait(), 'second: ' . $second->stderr());
        self::assertSame(3, $third->wait(), 'third: ' . $third->stderr());
        self::assertFalse($this->getStore()->exists(new Key($resource)));
    }
}
